//===- TrainMetrics.cpp - --log-file JSON lines and the loss curve --------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "kiln/runtime/TrainMetrics.h"

#include "kiln/artifact/FileIO.h"
#include "kiln/artifact/Json.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <sys/stat.h>
#include <unistd.h>

using namespace kiln::runtime;
using kiln::artifact::Json;

namespace {
std::string number(double v) {
  if (!std::isfinite(v))
    return "null"; // JSON has no NaN; a non-finite loss stops the run anyway
  char text[40];
  std::snprintf(text, sizeof(text), "%.17g", v);
  return text;
}

std::string fixed(double v, int digits) {
  char text[40];
  std::snprintf(text, sizeof(text), "%.*f", digits, v);
  return text;
}
} // namespace

std::string kiln::runtime::formatMetricsLine(const StepMetrics &m) {
  std::string line = "{\"step\": " + std::to_string(m.step);
  auto add = [&](const char *key, const std::optional<double> &v) {
    if (v)
      line += std::string(", \"") + key + "\": " + number(*v);
  };
  add("loss", m.loss);
  add("lr", m.lr);
  add("grad_norm", m.gradNorm);
  if (m.tokens)
    line += ", \"tokens\": " + std::to_string(*m.tokens);
  add("tokens_per_s", m.tokensPerSecond);
  add("eval_loss", m.evalLoss);
  return line + "}";
}

Expected<std::vector<StepMetrics>> kiln::runtime::readMetricsLog(const std::string &path) {
  Expected<kiln::artifact::MappedFile> file = kiln::artifact::MappedFile::open(path);
  if (!file)
    return Error{file.getError()};
  std::string_view text(reinterpret_cast<const char *>(file->data()), file->size());
  std::map<int64_t, StepMetrics> steps;
  size_t start = 0, lineNumber = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos)
      end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++lineNumber;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos)
      continue;
    Expected<Json> parsed = Json::parse(line);
    const Json *step = parsed && parsed->isObject() ? parsed->get("step") : nullptr;
    if (!step || !step->isInteger())
      return Error{path + ": line " + std::to_string(lineNumber) +
                   ": not a JSON object with an integer \"step\"" +
                   (parsed ? "" : " (" + parsed.getError() + ")")};
    StepMetrics &m = steps[step->getInteger()];
    m.step = step->getInteger();
    auto read = [&](const char *key, std::optional<double> &out) {
      if (const Json *v = parsed->get(key); v && v->isNumber())
        out = v->getNumber();
    };
    read("loss", m.loss);
    read("lr", m.lr);
    read("grad_norm", m.gradNorm);
    read("tokens_per_s", m.tokensPerSecond);
    read("eval_loss", m.evalLoss);
    if (const Json *v = parsed->get("tokens"); v && v->isInteger())
      m.tokens = v->getInteger();
  }
  std::vector<StepMetrics> out;
  for (auto &[step, m] : steps)
    out.push_back(m);
  return out;
}

std::string kiln::runtime::lossCurvePath(const std::string &logPath) {
  size_t slash = logPath.rfind('/');
  size_t dot = logPath.rfind('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash) ||
      dot == (slash == std::string::npos ? 0 : slash + 1))
    return logPath + ".svg";
  return logPath.substr(0, dot) + ".svg";
}

namespace {
/// 1, 2 or 5 times a power of ten: about `count` ticks over [lo, hi].
double tickStep(double lo, double hi, int count) {
  double raw = (hi - lo) / count;
  if (!(raw > 0))
    return 1;
  double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * power >= raw)
      return m * power;
  return 10 * power;
}

std::string escape(const std::string &text) {
  std::string out;
  for (char c : text) {
    if (c == '&')
      out += "&amp;";
    else if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (static_cast<unsigned char>(c) < 0x20)
      out += ' ';
    else
      out += c;
  }
  return out;
}
} // namespace

std::string kiln::runtime::renderLossCurveSvg(const std::vector<StepMetrics> &metrics,
                                              const std::string &title) {
  const double width = 720, height = 420, left = 70, right = 20, top = 40, bottom = 50;
  std::vector<std::pair<double, double>> train, eval;
  for (const StepMetrics &m : metrics) {
    if (m.loss && std::isfinite(*m.loss))
      train.push_back({static_cast<double>(m.step), *m.loss});
    if (m.evalLoss && std::isfinite(*m.evalLoss))
      eval.push_back({static_cast<double>(m.step), *m.evalLoss});
  }
  double x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  bool any = false;
  for (const auto *series : {&train, &eval})
    for (auto [x, y] : *series) {
      if (!any) {
        x0 = x1 = x;
        y0 = y1 = y;
        any = true;
      }
      x0 = std::min(x0, x), x1 = std::max(x1, x);
      y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  if (x1 <= x0)
    x1 = x0 + 1;
  if (y1 <= y0)
    y0 -= 0.5, y1 += 0.5;
  double pad = (y1 - y0) * 0.05;
  y0 -= pad, y1 += pad;
  double plotW = width - left - right, plotH = height - top - bottom;
  auto px = [&](double x) { return left + (x - x0) / (x1 - x0) * plotW; };
  auto py = [&](double y) { return top + (y1 - y) / (y1 - y0) * plotH; };

  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + fixed(width, 0) +
                    "\" height=\"" + fixed(height, 0) + "\" viewBox=\"0 0 " + fixed(width, 0) +
                    " " + fixed(height, 0) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg += "<text x=\"" + fixed(width / 2, 1) +
         "\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">" + escape(title) + "</text>\n";
  // Grid and ticks.
  double ys = tickStep(y0, y1, 6);
  for (double y = std::ceil(y0 / ys) * ys; y <= y1 + 1e-12; y += ys) {
    svg += "<line x1=\"" + fixed(left, 1) + "\" y1=\"" + fixed(py(y), 1) + "\" x2=\"" +
           fixed(width - right, 1) + "\" y2=\"" + fixed(py(y), 1) + "\" stroke=\"#dddddd\"/>\n";
    svg += "<text x=\"" + fixed(left - 6, 1) + "\" y=\"" + fixed(py(y) + 4, 1) +
           "\" text-anchor=\"end\">" + number(std::round(y / ys) * ys).substr(0, 8) + "</text>\n";
  }
  double xs = std::max(1.0, tickStep(x0, x1, 8));
  for (double x = std::ceil(x0 / xs) * xs; x <= x1 + 1e-9; x += xs)
    svg += "<text x=\"" + fixed(px(x), 1) + "\" y=\"" + fixed(height - bottom + 18, 1) +
           "\" text-anchor=\"middle\">" + fixed(x, 0) + "</text>\n";
  svg += "<rect x=\"" + fixed(left, 1) + "\" y=\"" + fixed(top, 1) + "\" width=\"" +
         fixed(plotW, 1) + "\" height=\"" + fixed(plotH, 1) +
         "\" fill=\"none\" stroke=\"black\"/>\n";
  svg += "<text x=\"" + fixed(left + plotW / 2, 1) + "\" y=\"" + fixed(height - 10, 1) +
         "\" text-anchor=\"middle\">step</text>\n";
  svg += "<text transform=\"translate(16 " + fixed(top + plotH / 2, 1) +
         ") rotate(-90)\" text-anchor=\"middle\">loss</text>\n";
  auto polyline = [&](const std::vector<std::pair<double, double>> &series, const char *color,
                      const char *cls) {
    if (series.empty())
      return;
    svg += std::string("<polyline class=\"") + cls + "\" fill=\"none\" stroke=\"" + color +
           "\" stroke-width=\"1.5\" points=\"";
    for (auto [x, y] : series)
      svg += fixed(px(x), 2) + "," + fixed(py(y), 2) + " ";
    svg += "\"/>\n";
  };
  polyline(train, "#1f77b4", "train");
  polyline(eval, "#d62728", "eval");
  for (auto [x, y] : eval)
    svg += "<circle cx=\"" + fixed(px(x), 2) + "\" cy=\"" + fixed(py(y), 2) +
           "\" r=\"3\" fill=\"#d62728\"/>\n";
  // Legend.
  double lx = width - right - 150, ly = top + 16;
  svg += "<line x1=\"" + fixed(lx, 1) + "\" y1=\"" + fixed(ly, 1) + "\" x2=\"" + fixed(lx + 24, 1) +
         "\" y2=\"" + fixed(ly, 1) + "\" stroke=\"#1f77b4\" stroke-width=\"2\"/>\n";
  svg += "<text x=\"" + fixed(lx + 30, 1) + "\" y=\"" + fixed(ly + 4, 1) + "\">train loss (" +
         std::to_string(train.size()) + ")</text>\n";
  if (!eval.empty()) {
    svg += "<line x1=\"" + fixed(lx, 1) + "\" y1=\"" + fixed(ly + 18, 1) + "\" x2=\"" +
           fixed(lx + 24, 1) + "\" y2=\"" + fixed(ly + 18, 1) +
           "\" stroke=\"#d62728\" stroke-width=\"2\"/>\n";
    svg += "<text x=\"" + fixed(lx + 30, 1) + "\" y=\"" + fixed(ly + 22, 1) + "\">eval loss (" +
           std::to_string(eval.size()) + ")</text>\n";
  }
  svg += "</svg>\n";
  return svg;
}

Expected<MetricsLog> MetricsLog::open(const std::string &path) {
  struct stat info;
  if (::stat(path.c_str(), &info) == 0 && !S_ISREG(info.st_mode))
    return Error{path + ": not a regular file; refusing to append the training log to it"};
  int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0)
    return Error{kiln::artifact::errnoError(path, "cannot open the log").message};
  std::FILE *file = ::fdopen(fd, "a");
  if (!file) {
    ::close(fd);
    return Error{kiln::artifact::errnoError(path).message};
  }
  return MetricsLog(file, path);
}

MetricsLog::MetricsLog(MetricsLog &&other) noexcept
    : file(other.file), path(std::move(other.path)) {
  other.file = nullptr;
}

MetricsLog::~MetricsLog() {
  if (file)
    std::fclose(file);
}

Status MetricsLog::append(const StepMetrics &metrics) {
  std::string line = formatMetricsLine(metrics) + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file) != line.size() || std::fflush(file) != 0)
    return kiln::artifact::errnoError(path, "cannot write the log");
  return Status::success();
}
