//===- TrainLoopTest.cpp - The training loop's GPU-free parts ---*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Learning-rate schedules against Hugging Face transformers' values,
// periodic checkpoint names and rotation, the --log-file lines read back
// and the loss-curve SVG.
//
//===----------------------------------------------------------------------===//

#include "Check.h"

#include "kiln/artifact/FileIO.h"
#include "kiln/runtime/CheckpointRotation.h"
#include "kiln/runtime/LrSchedule.h"
#include "kiln/runtime/TrainMetrics.h"

#include <cmath>
#include <cstdlib>
#include <sys/stat.h>
#include <unistd.h>

using namespace kiln::runtime;
using kiln::artifact::FileWriter;
using kiln::artifact::writeFileAtomically;

static std::string tempDir;

static bool near(double a, double b) { return std::fabs(a - b) <= 1e-15 + 1e-12 * std::fabs(b); }

/// The learning rate of steps 1..12 for peak 1e-3, 3 warmup steps and 10
/// steps in all, printed by transformers 5.17 (torch 2.11) from
/// optimizer.param_groups[0]["lr"] before each optimizer.step() with
/// get_{linear,cosine,constant}_schedule_with_warmup and
/// get_cosine_with_min_lr_schedule_with_warmup(min_lr_rate=0.1).
static void testSchedulesMatchTransformers() {
  struct Case {
    LrSchedule::Kind kind;
    double minRatio;
    double want[12];
  } cases[] = {
      {LrSchedule::Kind::Linear,
       0,
       {0, 0.00033333333333333332, 0.00066666666666666664, 0.001, 0.0008571428571428571,
        0.00071428571428571429, 0.00057142857142857136, 0.00042857142857142855,
        0.00028571428571428568, 0.00014285714285714284, 0, 0}},
      {LrSchedule::Kind::Cosine,
       0,
       {0, 0.00033333333333333332, 0.00066666666666666664, 0.001, 0.00095048443395120952,
        0.00081174490092936679, 0.00061126046697815718, 0.00038873953302184284,
        0.00018825509907063325, 4.9515566048790485e-05, 0, 4.951556604879043e-05}},
      {LrSchedule::Kind::Constant,
       0,
       {0, 0.00033333333333333332, 0.00066666666666666664, 0.001, 0.001, 0.001, 0.001, 0.001, 0.001,
        0.001, 0.001, 0.001}},
      {LrSchedule::Kind::Cosine,
       0.1,
       {0, 0.00033333333333333332, 0.00066666666666666664, 0.001, 0.00095543599055608857,
        0.00083057041083643018, 0.00065013442028034147, 0.00044986557971965859,
        0.00026942958916356994, 0.00014456400944391147, 0.0001, 0.00014456400944391141}},
  };
  for (const Case &c : cases) {
    LrSchedule s;
    s.kind = c.kind;
    s.peak = 1e-3;
    s.warmup = 3;
    s.total = 10;
    s.minRatio = c.minRatio;
    for (int t = 1; t <= 12; ++t)
      if (!near(s.at(t), c.want[t - 1])) {
        std::fprintf(stderr, "%s min %g step %d: %.17g, transformers %.17g\n",
                     lrScheduleName(c.kind), c.minRatio, t, s.at(t), c.want[t - 1]);
        CHECK(false);
      }
  }
  // No warmup: step 1 runs at the peak; constant stays there.
  LrSchedule constant;
  constant.peak = 0.5;
  constant.total = 4;
  CHECK(constant.at(1) == 0.5 && constant.at(4) == 0.5);
  LrSchedule linear = constant;
  linear.kind = LrSchedule::Kind::Linear;
  CHECK(linear.at(1) == 0.5 && near(linear.at(2), 0.375) && near(linear.at(4), 0.125));
  CHECK(parseLrScheduleKind("cosine") == LrSchedule::Kind::Cosine);
  CHECK(!parseLrScheduleKind("exp"));
}

static void touch(const std::string &path) {
  CHECK(writeFileAtomically(path, [](FileWriter &w) { return w.write("x"); }));
}

static void testCheckpointRotation() {
  CHECK_EQ(periodicCheckpointPath("run/ckpt.safetensors", 20), "run/ckpt-step20.safetensors");
  CHECK_EQ(periodicCheckpointPath("ckpt", 3), "ckpt-step3");
  CHECK_EQ(periodicCheckpointPath("a.b/ckpt.safetensors", 7), "a.b/ckpt-step7.safetensors");
  std::string save = tempDir + "/ckpt.safetensors";
  for (int step : {10, 20, 30, 40})
    touch(periodicCheckpointPath(save, step));
  // Not ours: other stems, a leading zero, a directory of the pattern.
  touch(tempDir + "/ckpt-step05.safetensors");
  touch(tempDir + "/other-step1.safetensors");
  touch(tempDir + "/ckpt.safetensors");
  CHECK(::mkdir((tempDir + "/ckpt-step1.safetensors").c_str(), 0755) == 0);
  Expected<std::vector<std::pair<int64_t, std::string>>> found = listPeriodicCheckpoints(save);
  CHECK(found && found->size() == 4);
  if (found && found->size() == 4)
    CHECK((*found)[0].first == 10 && (*found)[3].first == 40);
  std::vector<std::string> removed;
  CHECK(prunePeriodicCheckpoints(save, 2, removed));
  CHECK(removed.size() == 2);
  found = listPeriodicCheckpoints(save);
  CHECK(found && found->size() == 2 && (*found)[0].first == 30);
  CHECK(::access((tempDir + "/ckpt-step05.safetensors").c_str(), F_OK) == 0);
  CHECK(::access((tempDir + "/ckpt.safetensors").c_str(), F_OK) == 0);
  CHECK(::access((tempDir + "/ckpt-step1.safetensors").c_str(), F_OK) == 0);
  removed.clear();
  CHECK(prunePeriodicCheckpoints(save, 5, removed) && removed.empty());
}

static void testMetricsLog() {
  StepMetrics m;
  m.step = 3;
  m.loss = 2.5;
  m.lr = 0.001;
  m.gradNorm = 1.25;
  m.tokens = 96;
  m.tokensPerSecond = 1000;
  CHECK_EQ(formatMetricsLine(m),
           "{\"step\": 3, \"loss\": 2.5, \"lr\": 0.001, \"grad_norm\": 1.25, \"tokens\": 96, "
           "\"tokens_per_s\": 1000}");
  std::string path = tempDir + "/log.jsonl";
  {
    Expected<MetricsLog> log = MetricsLog::open(path);
    CHECK(log);
    if (!log)
      return;
    for (int t = 1; t <= 4; ++t) {
      StepMetrics s;
      s.step = t;
      s.loss = 5.0 - t;
      CHECK(log->append(s));
    }
    StepMetrics e;
    e.step = 4;
    e.evalLoss = 1.5;
    CHECK(log->append(e));
  }
  {
    // A resumed run rewrites step 4 and goes on.
    Expected<MetricsLog> log = MetricsLog::open(path);
    CHECK(log);
    StepMetrics s;
    s.step = 4;
    s.loss = 0.75;
    CHECK(log && log->append(s));
    s.step = 5;
    s.loss = 0.5;
    CHECK(log && log->append(s));
  }
  Expected<std::vector<StepMetrics>> read = readMetricsLog(path);
  CHECK(read && read->size() == 5);
  if (read && read->size() == 5) {
    CHECK((*read)[3].loss == 0.75 && (*read)[3].evalLoss == 1.5);
    CHECK((*read)[4].step == 5 && !(*read)[4].evalLoss);
    std::string svg = renderLossCurveSvg(*read, "t");
    CHECK(svg.rfind("<svg", 0) == 0 && svg.find("</svg>") != std::string::npos);
    CHECK(svg.find("class=\"train\"") != std::string::npos);
    CHECK(svg.find("class=\"eval\"") != std::string::npos);
    CHECK(svg.find("train loss (5)") != std::string::npos);
    CHECK(svg.find("eval loss (1)") != std::string::npos);
  }
  CHECK_EQ(lossCurvePath("run/log.jsonl"), "run/log.svg");
  CHECK_EQ(lossCurvePath("run.d/log"), "run.d/log.svg");
  // A damaged line names the file and the line.
  std::string bad = tempDir + "/bad.jsonl";
  CHECK(writeFileAtomically(
      bad, [](FileWriter &w) { return w.write("{\"step\": 1}\n{\"loss\": 2}\n"); }));
  Expected<std::vector<StepMetrics>> damaged = readMetricsLog(bad);
  CHECK(!damaged && damaged.getError().find("bad.jsonl: line 2:") != std::string::npos);
  // Only regular files are appended to.
  CHECK(!MetricsLog::open(tempDir));
}

int main() {
  char pattern[] = "/tmp/kiln-trainloop-XXXXXX";
  const char *dir = ::mkdtemp(pattern);
  if (!dir)
    return 1;
  tempDir = dir;
  testSchedulesMatchTransformers();
  testCheckpointRotation();
  testMetricsLog();
  std::system(("rm -rf '" + tempDir + "'").c_str());
  return finishChecks();
}
