//===- Autotune.cpp - Measure a step's candidates on this GPU -------------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "kiln/runtime/Autotune.h"

#include "AutotuneNf4.h"
#include "AutotuneTiming.h"
#include "kiln/runtime/GemmScreening.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <set>

using namespace kiln::runtime;
using namespace kiln::artifact;

namespace {

/// Events recorded in pairs around enqueued work, read after one sync.
class EventPairs {
public:
  EventPairs(const Device &device, size_t pairs) : device(device), events(2 * pairs, nullptr) {}
  ~EventPairs() {
    for (CUevent e : events)
      if (e)
        device.getDriver().cuEventDestroy_v2(e);
  }
  Status create() {
    for (CUevent &e : events)
      if (Status s =
              device.check(device.getDriver().cuEventCreate(&e, CU_EVENT_DEFAULT), "cuEventCreate");
          !s)
        return s;
    return Status::success();
  }
  Status record(size_t pair, bool end) {
    return device.check(
        device.getDriver().cuEventRecord(events[2 * pair + end], device.getStream()),
        "cuEventRecord");
  }
  Expected<double> elapsed(size_t pair) {
    float ms = 0;
    if (Status s = device.check(
            device.getDriver().cuEventElapsedTime_v2(&ms, events[2 * pair], events[2 * pair + 1]),
            "cuEventElapsedTime");
        !s)
      return s.takeError();
    return static_cast<double>(ms);
  }

private:
  const Device &device;
  std::vector<CUevent> events;
};

Expected<std::string> download(const Device &device, CUdeviceptr ptr, size_t bytes) {
  // The synchronous copy runs on the legacy stream: wait for ours first.
  if (Status s = device.synchronize(); !s)
    return s.takeError();
  std::string data(bytes, '\0');
  if (bytes)
    if (Status s = device.check(device.getDriver().cuMemcpyDtoH_v2(data.data(), ptr, bytes),
                                "cuMemcpyDtoH");
        !s)
      return s.takeError();
  return data;
}

Status copyDevice(const Device &device, CUdeviceptr to, CUdeviceptr from, size_t bytes) {
  return device.check(device.getDriver().cuMemcpyDtoDAsync_v2(to, from, bytes, device.getStream()),
                      "cuMemcpyDtoDAsync");
}

/// timeRuns of GEMM candidates, the operands rotated over \p sites (other
/// layers' activations and weights: caches do not flatter a candidate that
/// reads the same bytes again).
Expected<std::vector<double>> timeCandidates(StepExecutor &x, const Device &device,
                                             const std::vector<StepExecutor::GemmSite> &all,
                                             const std::vector<size_t> &sites,
                                             const std::vector<cublasLtMatmulAlgo_t> &candidates,
                                             const std::vector<size_t> &timed, int warmup, int reps,
                                             int calls = 1) {
  size_t rotation = 0;
  return timeRuns(x, device, timed, warmup, reps, calls, [&](size_t candidate) {
    const StepExecutor::GemmSite &from = all[sites[rotation++ % sites.size()]];
    return x.enqueueGemm(sites.front(), candidates[candidate], from.a, from.b);
  });
}

/// A close call (closeCallFinalists): the finalists again, interleaved, in
/// rounds whose order rotates; the median of the rounds' medians decides
/// and only finalists may win, so a candidate whose first median was lucky
/// does not flip the choice between runs. \p time(order, warmup, reps)
/// measures like timeRuns.
Status remeasureCloseCalls(
    std::vector<double> &ms, const TuneOptions &options, TunedOp &row,
    const std::function<Expected<std::vector<double>>(const std::vector<size_t> &, int, int)>
        &time) {
  std::vector<size_t> finalists = closeCallFinalists(ms);
  if (finalists.empty() || options.closeRounds <= 0)
    return Status::success();
  std::vector<std::vector<double>> rounds(finalists.size());
  for (int round = 0; round < options.closeRounds; ++round) {
    std::vector<size_t> order(finalists.size());
    for (size_t f = 0; f < finalists.size(); ++f)
      order[f] = finalists[(f + static_cast<size_t>(round)) % finalists.size()];
    Expected<std::vector<double>> again = time(order, 1, options.reps);
    if (!again)
      return again.takeError();
    for (size_t f = 0; f < order.size(); ++f)
      rounds[(f + static_cast<size_t>(round)) % finalists.size()].push_back((*again)[f]);
  }
  std::fill(ms.begin(), ms.end(), -1.0);
  for (size_t f = 0; f < finalists.size(); ++f)
    ms[finalists[f]] = median(rounds[f]);
  row.remeasured = finalists.size();
  return Status::success();
}

/// Measures the candidates of one GEMM signature; \p sites share it, the
/// first is the one the step is about to run.
Expected<TuningEntry> tuneGemm(StepExecutor &x, const Device &device,
                               const std::vector<StepExecutor::GemmSite> &all,
                               const std::vector<size_t> &sites, const TuneOptions &options,
                               TunedOp &row) {
  const StepExecutor::GemmSite &site = all[sites.front()];
  Expected<std::vector<cublasLtMatmulAlgo_t>> candidates =
      x.getGemmCandidates(sites.front(), options.topK);
  if (!candidates)
    return candidates.takeError();
  // The algorithm the step runs now is the default, candidate 0 (cuBLASLt
  // ranks it first too; kept first even if its top-K order differed).
  auto same = [](const cublasLtMatmulAlgo_t &p, const cublasLtMatmulAlgo_t &q) {
    return !std::memcmp(&p, &q, sizeof(p));
  };
  for (size_t j = 0; j < candidates->size(); ++j)
    if (same((*candidates)[j], site.algo)) {
      candidates->erase(candidates->begin() + static_cast<std::ptrdiff_t>(j));
      break;
    }
  candidates->insert(candidates->begin(), site.algo);
  if (candidates->size() > static_cast<size_t>(options.topK))
    candidates->resize(static_cast<size_t>(options.topK));
  size_t heuristic = candidates->size();
  // The output before: restored before every run, so a GEMM that reads its
  // output (accumulation) sees the same values each time, and the step
  // continues from them.
  Expected<DeviceBuffer> saved = DeviceBuffer::allocate(device, std::max<size_t>(site.cBytes, 1));
  if (!saved)
    return Error{site.label + ": a copy of its output: " + saved.getError()};
  if (Status s = copyDevice(device, saved->get(), site.c, site.cBytes); !s)
    return s.takeError();
  auto restore = [&]() { return copyDevice(device, site.c, saved->get(), site.cBytes); };

  // Calls per sample: enough that a sample of the default lasts sampleMs.
  int calls = 1;
  if (options.sampleMs > 0) {
    Expected<std::vector<double>> probe =
        timeCandidates(x, device, all, sites, *candidates, {0}, 1, 3);
    if (!probe)
      return probe.takeError();
    double once = (*probe)[0];
    if (once > 0)
      calls = static_cast<int>(std::clamp(std::ceil(options.sampleMs / once), 1.0, 64.0));
  }

  // Thin GEMMs: configurations beyond the heuristic's list join the
  // candidates, the fastest of a screening that two runs repeat
  // (GemmScreening.h): indexed in their configurations' order, so two runs
  // index them alike; every one screened, those near the cut measured
  // again, the cut keeping each group's best and taking times within the
  // tie tolerance of it by index.
  if (options.extra > 0 && isThinGemm(site.m, site.n, site.k) &&
      heuristic < static_cast<size_t>(kMaxTuningCandidates)) {
    Expected<std::vector<cublasLtMatmulAlgo_t>> space =
        x.getGemmSearchSpace(sites.front(), *candidates, options.screenLimit);
    if (!space)
      return space.takeError();
    std::vector<std::pair<GemmConfig, cublasLtMatmulAlgo_t>> found;
    for (const cublasLtMatmulAlgo_t &algo : *space) {
      Expected<GemmConfig> config = x.getGemmConfig(algo);
      if (!config)
        return Error{site.label + ": " + config.getError()};
      // The check passed; a launch must too.
      if (Status s = x.enqueueGemm(sites.front(), algo, site.a, site.b); s)
        found.emplace_back(*config, algo);
    }
    std::stable_sort(found.begin(), found.end(),
                     [](const auto &p, const auto &q) { return p.first < q.first; });
    std::vector<cublasLtMatmulAlgo_t> runnable;
    std::vector<uint64_t> groups;
    for (const auto &[config, algo] : found) {
      runnable.push_back(algo);
      groups.push_back(screenGroup(config));
    }
    std::vector<size_t> order(runnable.size());
    for (size_t i = 0; i < order.size(); ++i)
      order[i] = i;
    Expected<std::vector<double>> screen =
        timeCandidates(x, device, all, sites, runnable, order, 1, kScreenSamples, calls);
    if (!screen)
      return screen.takeError();
    ScreenPolicy policy;
    policy.keep = std::min(static_cast<size_t>(options.extra),
                           static_cast<size_t>(kMaxTuningCandidates) - heuristic);
    policy.maxRescreen = std::max(policy.maxRescreen, policy.keep);
    std::vector<double> ms = *screen;
    std::vector<size_t> again = screenRemeasure(ms, groups, policy);
    if (!again.empty()) {
      Expected<std::vector<double>> second =
          timeCandidates(x, device, all, sites, runnable, again, 1, kRescreenSamples, calls);
      if (!second)
        return second.takeError();
      std::fill(ms.begin(), ms.end(), -1.0);
      for (size_t t = 0; t < again.size(); ++t)
        ms[again[t]] = (*second)[t];
    }
    std::vector<size_t> admitted = screenAdmit(ms, groups, policy);
    for (size_t i : admitted)
      candidates->push_back(runnable[i]);
    row.screened = runnable.size();
    row.rescreened = again.size();
    row.extra = admitted.size();
  }
  size_t count = candidates->size();

  // Numerics: every candidate's output against the default's, on the real operands.
  size_t elements = site.cBytes / dtypeSize(site.cType);
  double bound = numericsBound(site.cType);
  std::string reference;
  std::vector<double> error(count, 0);
  std::vector<bool> eligible(count, false);
  for (size_t j = 0; j < count; ++j) {
    if (Status s = restore(); !s)
      return s.takeError();
    if (Status s = x.enqueueGemm(sites.front(), (*candidates)[j], site.a, site.b); !s) {
      if (j == 0)
        return s.takeError();
      continue; // a candidate that fails to run is not eligible
    }
    Expected<std::string> out = download(device, site.c, site.cBytes);
    if (!out)
      return out.takeError();
    if (j == 0) {
      reference = std::move(*out);
      eligible[0] = true;
      continue;
    }
    error[j] = relativeL2(out->data(), reference.data(), site.cType, elements);
    eligible[j] = error[j] <= bound;
  }

  // Timing: round-robin over the eligible candidates, operands rotated.
  std::vector<size_t> timed;
  for (size_t j = 0; j < count; ++j)
    if (eligible[j])
      timed.push_back(j);
  std::vector<double> ms(count, -1);
  Expected<std::vector<double>> first = timeCandidates(x, device, all, sites, *candidates, timed,
                                                       options.warmup, options.reps, calls);
  if (!first)
    return first.takeError();
  for (size_t t = 0; t < timed.size(); ++t)
    ms[timed[t]] = (*first)[t];
  std::vector<double> firstMs = ms;
  if (Status s = remeasureCloseCalls(ms, options, row,
                                     [&](const std::vector<size_t> &order, int warmup, int reps) {
                                       return timeCandidates(x, device, all, sites, *candidates,
                                                             order, warmup, reps, calls);
                                     });
      !s)
    return s.takeError();
  if (Status s = restore(); !s)
    return s.takeError();
  if (Status s = device.synchronize(); !s)
    return s.takeError();

  size_t winner = chooseWinner(ms);
  if (options.pickBeyondHeuristic) // tests: train must rebuild such a choice
    for (size_t j = heuristic; j < count; ++j)
      if (firstMs[j] >= 0 && (winner < heuristic || firstMs[j] < firstMs[winner]))
        winner = j;
  if (ms[winner] < 0) // chosen off the first medians: report those
    ms[winner] = firstMs[winner];
  TuningEntry entry;
  entry.kind = "gemm";
  entry.hash = site.hash;
  entry.shape = site.shape;
  entry.label = site.label;
  entry.candidates = static_cast<int64_t>(count);
  entry.choice = static_cast<int64_t>(winner);
  entry.algo = toHex(&(*candidates)[winner], sizeof(cublasLtMatmulAlgo_t));
  // train rebuilds a choice beyond the heuristic's list from it.
  Expected<GemmConfig> config = x.getGemmConfig((*candidates)[winner]);
  if (!config)
    return Error{site.label + ": " + config.getError()};
  entry.config = config->encode();
  // Two runs whose defaults differ measured different GEMMs as "default":
  // gpu-tune-check says so.
  if (Expected<GemmConfig> byDefault = x.getGemmConfig((*candidates)[0]))
    entry.defaultConfig = byDefault->encode();
  entry.defaultMs = ms[0];
  entry.tunedMs = ms[winner];
  entry.error = error[winner];
  row.label = site.label;
  row.calls = sites.size();
  row.candidates = count;
  row.eligible = timed.size();
  row.defaultMs = ms[0];
  row.tunedMs = ms[winner];
  row.choice =
      winner ? "algo " + std::to_string(winner + 1) + "/" + std::to_string(count) : "default";
  row.beyondHeuristic = winner >= heuristic;
  if (row.beyondHeuristic)
    row.choice += " (" + config->describe() + ")";
  row.error = error[winner];
  row.changed = winner != 0;
  return entry;
}

/// A launch whose buffers exceed this is not measured (its copies, one per
/// launch shape on the host, would cost more than the shapes differ).
constexpr size_t kMaxLaunchTuneBytes = size_t(1) << 31;

/// Measures the launch shapes of one generated kernel's launch; \p sites
/// share it (the same kernel image, shapes and sizes), the first is the one
/// the step is about to run. Each shape runs from the same buffers (all of
/// them saved first, restored before every run and at the end: a kernel
/// that updates in place, such as the optimizer's, sees the same inputs
/// each time) and must leave every buffer as the default shape does,
/// within the numerics bound of its dtype, to be eligible. Its operands are
/// not rotated: the other sites' inputs are not computed yet, and a kernel
/// may index with them.
Expected<std::optional<TuningEntry>> tuneLaunch(StepExecutor &x, const Device &device,
                                                const std::vector<StepExecutor::LaunchSite> &all,
                                                const std::vector<size_t> &sites,
                                                const TuneOptions &options, TunedOp &row) {
  const StepExecutor::LaunchSite &site = all[sites.front()];
  size_t count = site.shapes.size();
  row.label = site.label;
  row.calls = sites.size();
  row.candidates = count;
  row.choice = "default";
  size_t total = 0;
  for (const auto &buffer : site.buffers)
    total += buffer.bytes;
  if (total > kMaxLaunchTuneBytes) {
    row.choice = "default (not measured: " + std::to_string(total >> 20) + " MiB of buffers)";
    return std::optional<TuningEntry>();
  }
  std::vector<DeviceBuffer> saved;
  for (const auto &buffer : site.buffers) {
    Expected<DeviceBuffer> copy = DeviceBuffer::allocate(device, buffer.bytes);
    if (!copy)
      return Error{site.label + ": a copy of its buffers: " + copy.getError()};
    if (Status s = copyDevice(device, copy->get(), buffer.ptr, buffer.bytes); !s)
      return s.takeError();
    saved.push_back(std::move(*copy));
  }
  auto restore = [&]() -> Status {
    for (size_t b = 0; b < saved.size(); ++b)
      if (Status s = copyDevice(device, site.buffers[b].ptr, saved[b].get(), site.buffers[b].bytes);
          !s)
        return s;
    return Status::success();
  };

  // Numerics: every buffer after each shape against the default's.
  std::vector<std::string> reference;
  std::vector<double> error(count, 0);
  std::vector<bool> eligible(count, false);
  for (size_t j = 0; j < count; ++j) {
    if (Status s = restore(); !s)
      return s.takeError();
    const auto &[per, block] = site.shapes[j];
    std::string shape = encodeLaunchShape(per, block);
    if (Status s = x.enqueueLaunch(sites.front(), j); !s) {
      if (j == 0)
        return s.takeError();
      // A shape that does not launch (registers, shared memory) is not eligible.
      row.rejected.push_back(shape + " (did not launch)");
      continue;
    }
    eligible[j] = true;
    for (size_t b = 0; b < site.buffers.size(); ++b) {
      Expected<std::string> out = download(device, site.buffers[b].ptr, site.buffers[b].bytes);
      if (!out)
        return out.takeError();
      if (j == 0) {
        reference.push_back(std::move(*out));
        continue;
      }
      if (*out == reference[b])
        continue;
      DType dtype = site.buffers[b].dtype;
      double e = relativeL2(out->data(), reference[b].data(), dtype, out->size() / dtypeSize(dtype));
      error[j] = std::max(error[j], e);
      eligible[j] = eligible[j] && e <= numericsBound(dtype);
    }
    if (!eligible[j]) { // the compiler's claim that it computes the same failed
      char text[32];
      std::snprintf(text, sizeof(text), "%.1e", error[j]);
      row.rejected.push_back(shape + " (rel. error " + text + ")");
    }
  }

  std::vector<size_t> timed;
  for (size_t j = 0; j < count; ++j)
    if (eligible[j])
      timed.push_back(j);
  auto time = [&](const std::vector<size_t> &order, int warmup, int reps, int calls) {
    return timeRuns(x, device, order, warmup, reps, calls,
                    [&](size_t shape) { return x.enqueueLaunch(sites.front(), shape); });
  };
  int calls = 1;
  if (options.sampleMs > 0) {
    Expected<std::vector<double>> probe = time({0}, 1, 3, 1);
    if (!probe)
      return probe.takeError();
    if ((*probe)[0] > 0)
      calls = static_cast<int>(std::clamp(std::ceil(options.sampleMs / (*probe)[0]), 1.0, 64.0));
  }
  std::vector<double> ms(count, -1);
  Expected<std::vector<double>> first = time(timed, options.warmup, options.reps, calls);
  if (!first)
    return first.takeError();
  for (size_t t = 0; t < timed.size(); ++t)
    ms[timed[t]] = (*first)[t];
  if (Status s = remeasureCloseCalls(ms, options, row,
                                     [&](const std::vector<size_t> &order, int warmup, int reps) {
                                       return time(order, warmup, reps, calls);
                                     });
      !s)
    return s.takeError();
  if (Status s = restore(); !s)
    return s.takeError();
  if (Status s = device.synchronize(); !s)
    return s.takeError();

  size_t winner = chooseWinner(ms);
  const auto &[per, block] = site.shapes[winner];
  TuningEntry entry;
  entry.kind = "launch";
  entry.hash = site.hash;
  entry.shape = site.shape;
  entry.label = site.label;
  entry.candidates = static_cast<int64_t>(count);
  entry.choice = static_cast<int64_t>(winner);
  entry.config = encodeLaunchShape(per, block);
  entry.defaultMs = ms[0];
  entry.tunedMs = ms[winner];
  entry.error = error[winner];
  row.eligible = timed.size();
  row.defaultMs = ms[0];
  row.tunedMs = ms[winner];
  row.error = error[winner];
  row.changed = winner != 0;
  if (winner)
    row.choice = std::to_string(per) + " items/block of " + std::to_string(block);
  return std::optional<TuningEntry>(std::move(entry));
}

/// Median device times of whole steps of variants \p a and \p b, run
/// alternately (graph replays), parameters restored after.
Status timeVariants(StepExecutor &x, const std::string &a, const std::string &b,
                    const TuneOptions &options, double &msA, double &msB) {
  std::vector<double> samplesA, samplesB;
  for (int r = 0; r < options.warmup + options.stepReps; ++r)
    for (int v = 0; v < 2; ++v) {
      if (Status s = x.selectVariant(v ? b : a); !s)
        return s;
      double ms = 0;
      Expected<double> loss = x.runTimedStep(options.step, options.lr, ms);
      if (!loss)
        return loss.takeError();
      if (r >= options.warmup)
        (v ? samplesB : samplesA).push_back(ms);
    }
  if (Status s = x.selectVariant(""); !s)
    return s;
  msA = median(samplesA);
  msB = median(samplesB);
  return x.restoreTrainable();
}

/// The losses of one step of variants \p a and \p b from the same
/// parameters: their relative difference.
Expected<double> lossError(StepExecutor &x, const std::string &a, const std::string &b,
                           const TuneOptions &options) {
  double loss[2];
  for (int v = 0; v < 2; ++v) {
    if (Status s = x.selectVariant(v ? b : a); !s)
      return s.takeError();
    Expected<double> l = x.runStep(options.step, options.lr);
    if (!l)
      return l.takeError();
    loss[v] = *l;
    if (Status s = x.restoreTrainable(); !s)
      return s.takeError();
  }
  if (Status s = x.selectVariant(""); !s)
    return s.takeError();
  if (!std::isfinite(loss[0]) || !std::isfinite(loss[1]))
    return INFINITY;
  return loss[0] == 0 ? std::fabs(loss[1]) : std::fabs(loss[1] - loss[0]) / std::fabs(loss[0]);
}

/// Signature key -> the sites sharing it, in step order (GEMM or launch sites).
template <typename Site>
std::map<std::string, std::vector<size_t>> groupSites(const std::vector<Site> &sites) {
  std::map<std::string, std::vector<size_t>> groups;
  for (size_t i = 0; i < sites.size(); ++i)
    groups[sites[i].hash + " " + sites[i].shape].push_back(i);
  return groups;
}
} // namespace

size_t kiln::runtime::countTuningOps(const StepExecutor &x, bool tuneAttention,
                                     bool tuneLaunches) {
  return groupSites(x.getGemmSites()).size() + groupSites(x.getNf4Sites()).size() +
         (tuneLaunches ? groupSites(x.getLaunchSites()).size() : 0) +
         (tuneAttention && x.getAttentionSite() ? 1 : 0);
}

Expected<TuneResult> kiln::runtime::tuneShape(StepExecutor &x, const Device &device, TuningDb &db,
                                              const TuneOptions &options, size_t &doneOps,
                                              size_t totalOps) {
  TuneResult result;
  const TuningKey &key = x.getTuningKey();
  auto begin = std::chrono::steady_clock::now();
  size_t doneHere = 0;
  auto progress = [&](const std::string &label) {
    ++doneOps;
    ++doneHere;
    double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    if (options.progress)
      options.progress(doneOps, totalOps, label,
                       elapsed / static_cast<double>(doneHere) *
                           static_cast<double>(totalOps - doneOps));
  };
  if (Status s = x.snapshotTrainable(); !s)
    return s.takeError();
  // One ordinary step first: kernels loaded, the graph captured, caches warm.
  if (Expected<double> loss = x.runStep(options.step, options.lr); !loss)
    return loss.takeError();
  if (Status s = x.restoreTrainable(); !s)
    return s.takeError();

  // GEMMs and launches with variants, each when the step reaches its first
  // use.
  std::vector<StepExecutor::GemmSite> sites = x.getGemmSites();
  std::map<std::string, std::vector<size_t>> groups = groupSites(sites);
  std::map<size_t, const std::vector<size_t> *> firstAt; // action -> group
  for (const auto &[signature, members] : groups)
    firstAt[sites[members.front()].action] = &members;
  std::vector<StepExecutor::LaunchSite> launches;
  if (options.tuneLaunches)
    launches = x.getLaunchSites();
  std::map<std::string, std::vector<size_t>> launchGroups = groupSites(launches);
  std::map<size_t, const std::vector<size_t> *> launchAt;
  for (const auto &[signature, members] : launchGroups)
    launchAt[launches[members.front()].action] = &members;
  // NF4 GEMMs the fused kernel can run (AutotuneNf4.cpp), when the step
  // reaches the first of a signature: its dequantize launch has run.
  std::vector<StepExecutor::Nf4Site> nf4 = x.getNf4Sites();
  std::map<std::string, std::vector<size_t>> nf4Groups = groupSites(nf4);
  std::map<size_t, const std::vector<size_t> *> nf4At;
  for (const auto &[signature, members] : nf4Groups)
    nf4At[nf4[members.front()].action] = &members;
  Expected<double> walked = x.runStepWithHook(options.step, options.lr, [&](size_t action) {
    if (auto at = nf4At.find(action); at != nf4At.end()) {
      TunedOp row;
      Expected<TuningEntry> entry = tuneNf4(x, device, nf4, *at->second, options, row);
      if (!entry)
        return Status(entry.takeError());
      db.put(key, std::move(*entry));
      result.ops.push_back(std::move(row));
      progress(result.ops.back().label);
      // The GEMM's own cuBLASLt candidates are measured too (below).
    }
    if (auto at = launchAt.find(action); at != launchAt.end()) {
      TunedOp row;
      Expected<std::optional<TuningEntry>> entry =
          tuneLaunch(x, device, launches, *at->second, options, row);
      if (!entry)
        return Status(entry.takeError());
      if (*entry)
        db.put(key, std::move(**entry));
      result.ops.push_back(std::move(row));
      progress(result.ops.back().label);
      return Status::success();
    }
    auto it = firstAt.find(action);
    if (it == firstAt.end())
      return Status::success();
    TunedOp row;
    Expected<TuningEntry> entry = tuneGemm(x, device, sites, *it->second, options, row);
    if (!entry)
      return Status(entry.takeError());
    db.put(key, std::move(*entry));
    result.ops.push_back(std::move(row));
    progress(result.ops.back().label);
    return Status::success();
  });
  if (!walked)
    return walked.takeError();
  if (Status s = x.restoreTrainable(); !s)
    return s.takeError();

  // Attention: cuDNN and the kernels, when both can run it.
  std::optional<StepExecutor::AttentionSite> site;
  if (options.tuneAttention)
    site = x.getAttentionSite();
  if (site) {
    TunedOp row;
    row.label = site->label;
    row.calls = site->cudnnLaunches + site->kernelLaunches;
    std::string defaultImpl = site->cudnnLaunches ? "cudnn" : "kernels";
    TuningEntry entry;
    entry.kind = "attention";
    entry.hash = site->hash;
    entry.shape = site->shape;
    entry.label = site->label;
    entry.candidates = 1;
    entry.impl = defaultImpl;
    row.candidates = 1;
    row.eligible = 1;
    row.choice = "default (" + defaultImpl + ")";
    if (defaultImpl == "cudnn") {
      // The alternative: every attention launch on the generated kernels.
      if (Status s = x.prepareVariant("kernels", nullptr, false); !s)
        return s.takeError();
      entry.candidates = 2;
      row.candidates = 2;
      Expected<double> error = lossError(x, "", "kernels", options);
      if (!error)
        return error.takeError();
      double msDefault = 0, msKernels = 0;
      if (Status s = timeVariants(x, "", "kernels", options, msDefault, msKernels); !s)
        return s.takeError();
      bool ok = *error <= numericsBound(DType::BF16);
      row.eligible = ok ? 2 : 1;
      size_t winner = chooseWinner({msDefault, ok ? msKernels : -1.0});
      entry.choice = static_cast<int64_t>(winner);
      entry.impl = winner ? "kernels" : "cudnn";
      entry.defaultMs = msDefault;
      entry.tunedMs = winner ? msKernels : msDefault;
      entry.error = winner ? *error : 0;
      row.defaultMs = msDefault;
      row.tunedMs = entry.tunedMs;
      row.error = entry.error;
      row.changed = winner != 0;
      row.choice = winner ? "kernels (step)" : "default (cudnn, step)";
    }
    db.put(key, std::move(entry));
    result.ops.push_back(std::move(row));
    progress(site->label);
  }

  // The whole step, default against tuned, in this run.
  if (Status s = x.prepareVariant("tuned", &db, std::nullopt); !s)
    return s.takeError();
  Expected<double> error = lossError(x, "", "tuned", options);
  if (!error)
    return error.takeError();
  result.stepLossError = *error;
  if (Status s = timeVariants(x, "", "tuned", options, result.defaultStepMs, result.tunedStepMs);
      !s)
    return s.takeError();
  if (Status s = x.restoreTrainable(); !s)
    return s.takeError();
  return result;
}

Expected<std::vector<double>> kiln::runtime::timeRuns(StepExecutor &x, const Device &device,
                                                     const std::vector<size_t> &timed, int warmup,
                                                     int reps, int calls,
                                                     const std::function<Status(size_t)> &enqueue) {
  EventPairs events(device, timed.size() * static_cast<size_t>(reps));
  if (Status s = events.create(); !s)
    return s.takeError();
  for (int r = 0; r < warmup + reps; ++r)
    for (size_t t = 0; t < timed.size(); ++t) {
      bool measured = r >= warmup;
      size_t pair = static_cast<size_t>(r - warmup) * timed.size() + t;
      if (Status s = x.holdStream(); !s)
        return s.takeError();
      if (measured)
        if (Status s = events.record(pair, false); !s)
          return s.takeError();
      for (int c = 0; c < calls; ++c)
        if (Status s = enqueue(timed[t]); !s) {
          x.releaseStream();
          return s.takeError();
        }
      if (measured)
        if (Status s = events.record(pair, true); !s) {
          x.releaseStream();
          return s.takeError();
        }
      x.releaseStream();
    }
  if (Status s = device.synchronize(); !s)
    return s.takeError();
  std::vector<double> medians;
  for (size_t t = 0; t < timed.size(); ++t) {
    std::vector<double> samples;
    for (int r = 0; r < reps; ++r) {
      Expected<double> e = events.elapsed(static_cast<size_t>(r) * timed.size() + t);
      if (!e)
        return e.takeError();
      samples.push_back(*e / calls);
    }
    medians.push_back(median(samples));
  }
  return medians;
}
