//===- Progress.h - kiln compile's progress lines ---------------*- C++ -*-===//
//
// A cold artifact compile of a large model runs for tens of seconds, most of
// it in NVRTC. On a terminal one line on stderr is redrawn in place (stage,
// pass, NVRTC module k of N) and cleared before anything else prints; in a
// log (stderr not a terminal) the stages and NVRTC modules of compiles that
// run NVRTC are plain lines. --quiet turns it off.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TOOLS_KILN_PROGRESS_H
#define KILN_TOOLS_KILN_PROGRESS_H

#include "mlir/Pass/PassInstrumentation.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/Twine.h"

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

namespace kiln::driver {

class CompileProgress {
public:
  enum class Mode {
    Off,    ///< --quiet
    Lines,  ///< one plain line per stage and NVRTC module
    Redraw, ///< one line redrawn in place (a terminal)
  };
  /// Redraw on a terminal; else Lines when `long_` (the compile runs
  /// NVRTC), else Off.
  static Mode choose(bool quiet, bool longCompile);

  explicit CompileProgress(Mode mode);
  ~CompileProgress();

  Mode getMode() const { return mode; }
  /// A new stage: "import model.onnx", "train step", "NVRTC: 42 modules".
  void stage(const llvm::Twine &name);
  /// A pass of the current stage (redrawn only: a log gets the stages).
  void pass(llvm::StringRef argument);
  /// NVRTC finished module `done` of `total` (`name`), from the cache or not.
  void nvrtcModule(size_t done, size_t total, llvm::StringRef name, bool cached);
  /// Clears the redrawn line, e.g. before an error or a report prints.
  void clear();
  /// The last line ("wrote ..."): kept, also in a log; not with --quiet.
  void finish(const llvm::Twine &line);

  /// Clears the line of the live progress, if any: fail() and warnings
  /// call it so their line starts at the left margin.
  static void clearCurrent();

  /// Reports each pass the pass manager starts (Redraw only).
  std::unique_ptr<mlir::PassInstrumentation> instrumentation();

private:
  void draw(const std::string &text, bool keep);

  Mode mode;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  std::string currentStage;
  bool drawn = false;
  std::mutex lock; // nested pass pipelines run on several threads
};

/// "4.0 MB", "812 KB", "93 bytes".
std::string formatFileSize(uint64_t bytes);

} // namespace kiln::driver

#endif // KILN_TOOLS_KILN_PROGRESS_H
