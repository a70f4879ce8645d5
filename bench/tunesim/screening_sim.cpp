//===- screening_sim.cpp - Two tune runs of a thin GEMM, simulated --------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// A Monte Carlo of docs/tuning.md's screening and tie rule, CPU only: 120
// configurations of one thin GEMM (12 algorithm groups of 10, ~10 µs, the
// groups 8% apart, each configuration up to 25% slower than its group's
// base), measured by two tune runs under a noise model (per-sample normal
// noise, occasional outlier samples (x1.2), a per-run offset per configuration); it
// counts how often the two runs admit the same configurations, admit the
// true best, and choose the same or choices gpu-tune-check.sh calls NOT A
// TIE. "old": 2 samples, the fastest 24 by time, the 3% tie; "new": the
// library's screening (kiln/runtime/GemmScreening.h) and tie floor. Both
// with 20 timed reps and the close calls. A model, not a measurement.
//
//   g++ -O2 -std=c++17 -Iruntime/include bench/tunesim/screening_sim.cpp \
//     build-rt/lib/libKilnRuntime.a build-rt/lib/artifact/libKilnArtifact.a -ldl -o /tmp/sim
//   /tmp/sim [noise per sample] [outlier probability] [run offset] [outlier factor]
//            (defaults 0.02 0.05 0.01 1.2)
//
//===----------------------------------------------------------------------===//

#include "kiln/runtime/GemmScreening.h"
#include "kiln/runtime/TuningDb.h"
#include <algorithm>
#include <cstdio>
#include <random>
using namespace kiln::runtime;
struct Model {
  std::vector<double> truth;
  std::vector<uint64_t> groups;
};
std::mt19937_64 rng(1);
double outlierSize = 1.2; // an outlier sample's factor
double sample(double t, double runOffset, double sigma, double outlierP) {
  std::normal_distribution<double> n(0, sigma);
  std::uniform_real_distribution<double> u(0, 1);
  double v = t * runOffset * (1 + n(rng));
  if (u(rng) < outlierP)
    v *= outlierSize;
  return v;
}
std::vector<double> measure(const Model &m, const std::vector<double> &off,
                            const std::vector<size_t> &which, int samples, double sigma,
                            double outlierP) {
  std::vector<double> ms(m.truth.size(), -1);
  for (size_t i : which) {
    std::vector<double> s;
    for (int k = 0; k < samples; ++k)
      s.push_back(sample(m.truth[i], off[i], sigma, outlierP));
    ms[i] = median(s);
  }
  return ms;
}
int main(int argc, char **argv) {
  double sigma = argc > 1 ? atof(argv[1]) : 0.02, outlierP = argc > 2 ? atof(argv[2]) : 0.05,
         runSigma = argc > 3 ? atof(argv[3]) : 0.01;
  outlierSize = argc > 4 ? atof(argv[4]) : 1.2;
  int trials = 2000, same[2] = {0, 0}, best[2] = {0, 0}, choice[2] = {0, 0}, notTie[2] = {0, 0};
  for (int t = 0; t < trials; ++t) {
    Model m;
    std::uniform_real_distribution<double> u(0, 1);
    for (int g = 0; g < 12; ++g)
      for (int c = 0; c < 10; ++c) {
        m.truth.push_back(0.010 * (1 + 0.08 * g) * (1 + 0.25 * u(rng)));
        m.groups.push_back(g);
      }
    size_t n = m.truth.size(),
           trueBest = std::min_element(m.truth.begin(), m.truth.end()) - m.truth.begin();
    std::vector<size_t> all(n);
    for (size_t i = 0; i < n; ++i)
      all[i] = i;
    std::vector<size_t> adm[2][2];
    size_t win[2][2];
    double winMs[2][2], defMs[2][2];
    for (int run = 0; run < 2; ++run) {
      std::normal_distribution<double> rn(0, runSigma);
      std::vector<double> off(n);
      for (double &o : off)
        o = 1 + rn(rng);
      for (int mode = 0; mode < 2; ++mode) {
        std::vector<size_t> a;
        if (mode == 0) { // old: median of 2 (the mean), the fastest 24 by time
          std::vector<double> ms = measure(m, off, all, 2, sigma, outlierP);
          std::vector<size_t> o = all;
          std::stable_sort(o.begin(), o.end(), [&](size_t p, size_t q) { return ms[p] < ms[q]; });
          o.resize(24);
          std::sort(o.begin(), o.end());
          a = o;
        } else {
          ScreenPolicy p;
          std::vector<double> ms = measure(m, off, all, kScreenSamples, sigma, outlierP);
          std::vector<size_t> again = screenRemeasure(ms, m.groups, p);
          ms = measure(m, off, again, kRescreenSamples, sigma, outlierP);
          a = screenAdmit(ms, m.groups, p);
        }
        adm[run][mode] = a;
        best[mode] += std::count(a.begin(), a.end(), trueBest) > 0;
        // Candidates: a default (1.3x the best) then the admitted; 20 reps' medians.
        std::vector<double> cand = {sample(m.truth[trueBest] * 1.3, 1, 0, 0)};
        for (size_t i : a) {
          std::vector<double> s;
          for (int k = 0; k < 20; ++k)
            s.push_back(sample(m.truth[i], off[i], sigma, outlierP));
          cand.push_back(median(s));
        }
        // Close calls: the finalists again, 5 rounds of 20, the median of the medians.
        double fl = mode == 0 ? 0 : kTieFloorMs;
        std::vector<size_t> fin = closeCallFinalists(cand, kTieMargin, kCloseCallBand, fl);
        if (!fin.empty()) {
          std::vector<double> again(cand.size(), -1);
          for (size_t f : fin) {
            std::vector<double> rounds;
            for (int r = 0; r < 5; ++r) {
              std::vector<double> s;
              double t0 = f == 0 ? m.truth[trueBest] * 1.3 : m.truth[a[f - 1]];
              double o = f == 0 ? 1 : off[a[f - 1]];
              for (int k = 0; k < 20; ++k)
                s.push_back(sample(t0, o, sigma, outlierP));
              rounds.push_back(median(s));
            }
            again[f] = median(rounds);
          }
          cand = again;
        }
        size_t w = chooseWinner(cand, kTieMargin, fl);
        win[run][mode] = w == 0 ? SIZE_MAX : a[w - 1];
        winMs[run][mode] = cand[w];
        defMs[run][mode] = cand[0];
      }
    }
    for (int mode = 0; mode < 2; ++mode) {
      same[mode] += adm[0][mode] == adm[1][mode];
      choice[mode] += win[0][mode] == win[1][mode];
      if (win[0][mode] != win[1][mode]) {
        double tx = winMs[0][mode], ty = winMs[1][mode] * defMs[0][mode] / defMs[1][mode];
        double mn = std::min(tx, ty);
        double tol = mode == 0 ? 0.05 * mn : std::max(0.03 * mn, 0.0005) + 0.02 * mn;
        notTie[mode] += std::abs(tx - ty) > tol;
      }
    }
  }
  std::printf("noise %.0f%%/sample, %.0f%% outliers (x%.1f), run offset %.0f%%: %d trials of 120 "
              "configurations\n",
              sigma * 100, outlierP * 100, outlierSize, runSigma * 100, trials);
  const char *name[2] = {"old (2 samples, time cut, 3% tie)",
                         "new (5+11 samples, groups, tie cut, floor)"};
  for (int mode = 0; mode < 2; ++mode)
    std::printf("  %-44s same admitted %5.1f%%, true best admitted %5.1f%%, same choice %5.1f%%, "
                "NOT A TIE %5.2f%%\n",
                name[mode], 100.0 * same[mode] / trials, 100.0 * best[mode] / (2 * trials),
                100.0 * choice[mode] / trials, 100.0 * notTie[mode] / trials);
}
