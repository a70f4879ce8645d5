//===- Progress.cpp - kiln compile's progress lines -----------------------===//

#include "Progress.h"

#include "mlir/Pass/Pass.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;

namespace kiln::driver {

CompileProgress::Mode CompileProgress::choose(bool quiet, bool longCompile) {
  if (quiet)
    return Mode::Off;
  if (sys::Process::StandardErrIsDisplayed())
    return Mode::Redraw;
  return longCompile ? Mode::Lines : Mode::Off;
}

namespace {
CompileProgress *current = nullptr; // one compile per process
} // namespace

CompileProgress::CompileProgress(Mode mode) : mode(mode) { current = this; }

CompileProgress::~CompileProgress() {
  clear();
  current = nullptr;
}

void CompileProgress::clearCurrent() {
  if (current)
    current->clear();
}

void CompileProgress::draw(const std::string &text, bool keep) {
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::string line;
  raw_string_ostream os(line);
  os << "kiln: [" << format("%5.1f", seconds) << " s] " << text;
  if (mode == Mode::Redraw) {
    // Carriage return, the line, erase to its end: the next draw replaces it.
    errs() << "\r" << line << "\033[K";
    if (keep)
      errs() << "\n";
    drawn = !keep;
  } else {
    errs() << line << "\n";
  }
  errs().flush();
}

void CompileProgress::stage(const Twine &name) {
  if (mode == Mode::Off)
    return;
  std::lock_guard<std::mutex> guard(lock);
  currentStage = name.str();
  draw(currentStage, /*keep=*/false);
}

void CompileProgress::pass(StringRef argument) {
  if (mode != Mode::Redraw || argument.empty())
    return;
  std::lock_guard<std::mutex> guard(lock);
  draw(currentStage + ": " + argument.str(), false);
}

void CompileProgress::nvrtcModule(size_t done, size_t total, StringRef name, bool cached) {
  if (mode == Mode::Off)
    return;
  std::lock_guard<std::mutex> guard(lock);
  draw(("NVRTC module " + Twine(done) + "/" + Twine(total) + " (" + name + ", " +
        (cached ? "cached" : "compiled") + ")")
           .str(),
       false);
}

void CompileProgress::clear() {
  std::lock_guard<std::mutex> guard(lock);
  if (drawn) {
    errs() << "\r\033[K";
    errs().flush();
  }
  drawn = false;
}

void CompileProgress::finish(const Twine &line) {
  if (mode == Mode::Off)
    return;
  clear();
  errs() << "kiln: " << line << "\n";
}

namespace {
struct PassProgress final : mlir::PassInstrumentation {
  explicit PassProgress(CompileProgress &progress) : progress(progress) {}
  void runBeforePass(mlir::Pass *pass, mlir::Operation *) override {
    progress.pass(pass->getArgument());
  }
  CompileProgress &progress;
};
} // namespace

std::unique_ptr<mlir::PassInstrumentation> CompileProgress::instrumentation() {
  return std::make_unique<PassProgress>(*this);
}

std::string formatFileSize(uint64_t bytes) {
  std::string text;
  raw_string_ostream os(text);
  if (bytes >= 1000 * 1000)
    os << format("%.1f MB", bytes / 1e6);
  else if (bytes >= 1000)
    os << format("%.1f KB", bytes / 1e3);
  else
    os << bytes << " bytes";
  return text;
}

} // namespace kiln::driver
