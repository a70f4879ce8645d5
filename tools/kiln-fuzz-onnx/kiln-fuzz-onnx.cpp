//===- kiln-fuzz-onnx.cpp - libFuzzer target for the ONNX loader ----------===//
//
// Each input is written to a model file in a private temp folder and imported
// with kiln::importOnnxFile, as `kiln import` does. The importer must accept
// the model or reject it with one line that starts with the file's path; a
// crash, a sanitizer report, an uncaught exception or a multi-line message is
// a finding. When import succeeds the module is printed (to a null stream)
// and every kiln.parameter is loaded through OnnxWeightSource, as
// `kiln interp` would, so weight decoding is fuzzed too. Nothing is printed.
//
//   kiln-fuzz-onnx CORPUS_DIR -max_total_time=60 -rss_limit_mb=2048
//
// KILN_FUZZ_TEXT=1 in the environment feeds the bytes as ONNX text
// (.onnxtxt) instead of a binary model.
//
// Byte-level mutation mostly yields protobufs that do not parse, so a custom
// mutator also edits parsed models: op types, inputs and outputs, attribute
// types and values, initializer dims, dtypes, payloads and external data,
// graph input shapes, node order and the opset (KILN_FUZZ_BYTES_ONLY=1 turns
// it off).
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Graph/GraphDialect.h"
#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Import/OnnxImporter.h"
#include "kiln/Import/OnnxWeightSource.h"

#include "absl/strings/match.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/raw_ostream.h"

#include "onnx/onnx_pb.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

/// The model file every input is written to (one per fuzzing process, in its
/// own folder so external-data locations resolve next to it, not in /tmp).
const std::string &modelPath() {
  static const std::string path = [] {
    const char *tmp = std::getenv("TMPDIR");
    std::string dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/kiln-fuzz-XXXXXX";
    if (!mkdtemp(dir.data())) {
      std::perror("kiln-fuzz-onnx: mkdtemp");
      std::abort();
    }
    const char *text = std::getenv("KILN_FUZZ_TEXT");
    bool asText = text && std::strcmp(text, "0") != 0;
    return dir + (asText ? "/model.onnxtxt" : "/model.onnx");
  }();
  static const bool cleanup = [] {
    // libFuzzer ends a time-bounded run with exit(): tidy up then. A crash
    // leaves the folder behind, next to the artifact.
    return std::atexit([] {
             std::remove(modelPath().c_str());
             std::string dir = modelPath().substr(0, modelPath().rfind('/'));
             rmdir(dir.c_str());
           }) == 0;
  }();
  (void)cleanup;
  return path;
}

/// An importer error must be one line naming the model file.
void checkMessage(const std::string &path, absl::string_view message) {
  bool named = absl::StartsWith(message, path + ": ");
  bool oneLine = !absl::StrContains(message, '\n') && !absl::StrContains(message, '\r');
  if (named && oneLine)
    return;
  std::fprintf(stderr, "kiln-fuzz-onnx: bad error message (%s): %.*s\n",
               named ? "not one line" : "does not start with the model path",
               static_cast<int>(message.size()), message.data());
  std::abort();
}

//===----------------------------------------------------------------------===//
// Structure-aware mutation
//===----------------------------------------------------------------------===//

using Rng = std::minstd_rand;

size_t pick(Rng &rng, size_t n) { return n ? rng() % n : 0; }

int64_t interestingInt(Rng &rng) {
  static const int64_t values[] = {0,
                                   1,
                                   -1,
                                   2,
                                   -2,
                                   3,
                                   4,
                                   7,
                                   64,
                                   65,
                                   255,
                                   1 << 16,
                                   int64_t(1) << 31,
                                   -(int64_t(1) << 31),
                                   int64_t(1) << 32,
                                   int64_t(1) << 40,
                                   int64_t(1) << 62,
                                   std::numeric_limits<int64_t>::max(),
                                   std::numeric_limits<int64_t>::min(),
                                   std::numeric_limits<int64_t>::min() + 1};
  return values[pick(rng, std::size(values))];
}

const std::vector<std::string> &opTypes() {
  static const std::vector<std::string> ops = [] {
    std::vector<std::string> list = kiln::getSupportedOnnxOps();
    for (const char *extra : {"NonZero", "If", "Loop", "TopK", "Resize", ""})
      list.push_back(extra);
    return list;
  }();
  return ops;
}

const char *attributeName(Rng &rng) {
  static const char *names[] = {
      "axis",         "axes",         "perm",        "keepdims",
      "to",           "value",        "value_int",   "value_ints",
      "value_float",  "value_floats", "transA",      "transB",
      "alpha",        "beta",         "epsilon",     "split",
      "starts",       "ends",         "mode",        "reduction",
      "ignore_index", "upper",        "exclusive",   "reverse",
      "batch_dims",   "allowzero",    "approximate", "noop_with_empty_axes",
      "num_outputs",  "min",          "max",         "pads",
      "start",        "end",          "broadcast"};
  return names[pick(rng, std::size(names))];
}

std::vector<std::string> valueNames(const onnx::GraphProto &graph) {
  std::vector<std::string> names = {"", "undefined_value"};
  for (const auto &v : graph.input())
    names.push_back(v.name());
  for (const auto &t : graph.initializer())
    names.push_back(t.name());
  for (const auto &n : graph.node())
    for (const auto &o : n.output())
      names.push_back(o);
  return names;
}

void mutateTensor(onnx::TensorProto &t, Rng &rng) {
  switch (pick(rng, 8)) {
  case 0:
    if (t.dims_size())
      t.set_dims(pick(rng, t.dims_size()), interestingInt(rng));
    break;
  case 1: t.add_dims(interestingInt(rng) & 7); break;
  case 2:
    if (t.dims_size())
      t.mutable_dims()->RemoveLast();
    break;
  case 3: t.set_data_type(static_cast<int>(pick(rng, 25))); break;
  case 4: t.mutable_raw_data()->resize(pick(rng, t.raw_data().size() + 9)); break;
  case 5: {
    t.clear_raw_data();
    t.set_data_location(onnx::TensorProto::EXTERNAL);
    static const char *locations[] = {"w.bin", "", "../w.bin", "/dev/zero", "."};
    auto *location = t.add_external_data();
    location->set_key("location");
    location->set_value(locations[pick(rng, std::size(locations))]);
    auto *field = t.add_external_data();
    field->set_key(pick(rng, 2) ? "offset" : "length");
    field->set_value(pick(rng, 2) ? std::to_string(interestingInt(rng)) : "x");
    break;
  }
  case 6:
    for (int i = 0, n = static_cast<int>(pick(rng, 5)); i < n; ++i)
      t.add_int64_data(interestingInt(rng));
    break;
  default:
    t.clear_raw_data();
    t.add_float_data(1.5f);
    break;
  }
}

void mutateAttribute(onnx::AttributeProto &a, Rng &rng) {
  switch (pick(rng, 7)) {
  case 0: a.set_type(static_cast<onnx::AttributeProto::AttributeType>(pick(rng, 15))); break;
  case 1:
    a.set_type(onnx::AttributeProto::INT);
    a.set_i(interestingInt(rng));
    break;
  case 2:
    a.set_type(onnx::AttributeProto::FLOAT);
    a.set_f(interestingInt(rng) * 0.5f);
    break;
  case 3:
    a.set_type(onnx::AttributeProto::INTS);
    a.clear_ints();
    for (int i = 0, n = static_cast<int>(pick(rng, 5)); i < n; ++i)
      a.add_ints(interestingInt(rng));
    break;
  case 4:
    a.set_type(onnx::AttributeProto::STRING);
    a.set_s(pick(rng, 2) ? "none" : "\n");
    break;
  case 5: {
    a.set_type(onnx::AttributeProto::TENSOR);
    onnx::TensorProto *t = a.mutable_t();
    if (!t->has_data_type()) {
      t->set_data_type(onnx::TensorProto::INT64);
      t->add_dims(1);
      t->add_int64_data(interestingInt(rng));
    }
    mutateTensor(*t, rng);
    break;
  }
  default: a.set_name(attributeName(rng)); break;
  }
}

void mutateNode(onnx::GraphProto &graph, onnx::NodeProto &node, Rng &rng) {
  std::vector<std::string> names = valueNames(graph);
  switch (pick(rng, 9)) {
  case 0: node.set_op_type(opTypes()[pick(rng, opTypes().size())]); break;
  case 1:
    if (node.input_size())
      node.set_input(pick(rng, node.input_size()), names[pick(rng, names.size())]);
    break;
  case 2: node.add_input(names[pick(rng, names.size())]); break;
  case 3:
    if (node.input_size())
      node.mutable_input()->RemoveLast();
    break;
  case 4:
    if (pick(rng, 2) && node.output_size())
      node.mutable_output()->RemoveLast();
    else
      node.add_output(pick(rng, 2) ? "" : names[pick(rng, names.size())]);
    break;
  case 5:
  case 6:
    if (node.attribute_size())
      mutateAttribute(*node.mutable_attribute(pick(rng, node.attribute_size())), rng);
    else
      node.add_attribute()->set_name(attributeName(rng));
    break;
  case 7: {
    onnx::AttributeProto *a = node.add_attribute();
    a->set_name(attributeName(rng));
    mutateAttribute(*a, rng);
    break;
  }
  default: node.set_domain(pick(rng, 2) ? "com.example" : "ai.onnx"); break;
  }
}

void mutateModel(onnx::ModelProto &model, Rng &rng) {
  onnx::GraphProto &graph = *model.mutable_graph();
  switch (pick(rng, 10)) {
  case 0:
  case 1:
  case 2:
    if (graph.node_size())
      mutateNode(graph, *graph.mutable_node(pick(rng, graph.node_size())), rng);
    break;
  case 3:
    if (graph.initializer_size())
      mutateTensor(*graph.mutable_initializer(pick(rng, graph.initializer_size())), rng);
    break;
  case 4: {
    if (!graph.input_size())
      break;
    onnx::TypeProto::Tensor *type =
        graph.mutable_input(pick(rng, graph.input_size()))->mutable_type()->mutable_tensor_type();
    onnx::TensorShapeProto *shape = type->mutable_shape();
    switch (pick(rng, 5)) {
    case 0:
      if (shape->dim_size())
        shape->mutable_dim(pick(rng, shape->dim_size()))->set_dim_value(interestingInt(rng));
      break;
    case 1:
      if (shape->dim_size())
        shape->mutable_dim(pick(rng, shape->dim_size()))->set_dim_param(pick(rng, 2) ? "n" : "1x");
      break;
    case 2: shape->add_dim()->set_dim_value(interestingInt(rng) & 7); break;
    case 3: type->clear_shape(); break;
    default: type->set_elem_type(static_cast<int>(pick(rng, 25))); break;
    }
    break;
  }
  case 5:
    if (graph.node_size() > 1)
      graph.mutable_node()->SwapElements(pick(rng, graph.node_size()),
                                         pick(rng, graph.node_size()));
    break;
  case 6:
    if (graph.node_size()) {
      onnx::NodeProto copy = graph.node(pick(rng, graph.node_size()));
      *graph.add_node() = std::move(copy);
    }
    break;
  case 7: {
    std::vector<std::string> names = valueNames(graph);
    if (pick(rng, 2) && graph.output_size())
      graph.mutable_output()->RemoveLast();
    else
      graph.add_output()->set_name(names[pick(rng, names.size())]);
    break;
  }
  case 8:
    if (model.opset_import_size())
      model.mutable_opset_import(0)->set_version(pick(rng, 4) ? 1 + pick(rng, 24)
                                                              : interestingInt(rng));
    break;
  default:
    if (graph.initializer_size() && graph.input_size())
      graph.mutable_initializer(pick(rng, graph.initializer_size()))
          ->set_name(graph.input(pick(rng, graph.input_size())).name());
    break;
  }
}

} // namespace

extern "C" size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t maxSize);

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t maxSize,
                                          unsigned int seed) {
  static const bool bytesOnly = [] {
    const char *env = std::getenv("KILN_FUZZ_BYTES_ONLY");
    return env && std::strcmp(env, "0") != 0;
  }();
  Rng rng(seed);
  onnx::ModelProto model;
  if (bytesOnly || pick(rng, 3) == 0 || size > static_cast<size_t>(INT32_MAX) ||
      !model.ParseFromArray(data, static_cast<int>(size)))
    return LLVMFuzzerMutate(data, size, maxSize);
  for (int i = 0, n = 1 + static_cast<int>(pick(rng, 3)); i < n; ++i)
    mutateModel(model, rng);
  std::string bytes;
  if (!model.SerializeToString(&bytes) || bytes.size() > maxSize)
    return LLVMFuzzerMutate(data, size, maxSize);
  std::memcpy(data, bytes.data(), bytes.size());
  return bytes.size();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string &path = modelPath();
  {
    std::FILE *file = std::fopen(path.c_str(), "wb");
    if (!file || (size && std::fwrite(data, 1, size, file) != size) || std::fclose(file) != 0) {
      std::perror("kiln-fuzz-onnx: cannot write the model file");
      std::abort();
    }
  }

  mlir::MLIRContext context(mlir::MLIRContext::Threading::DISABLED);
  context.loadDialect<kiln::GraphDialect, mlir::func::FuncDialect>();
  absl::StatusOr<kiln::ImportResult> result = kiln::importOnnxFile(&context, path);
  if (!result.ok()) {
    checkMessage(path, result.status().message());
    return 0;
  }
  result->module->print(llvm::nulls());

  absl::StatusOr<std::unique_ptr<kiln::OnnxWeightSource>> weights =
      kiln::OnnxWeightSource::open(path);
  if (!weights.ok()) {
    checkMessage(path, weights.status().message());
    return 0;
  }
  result->module->walk([&](kiln::ParameterOp op) {
    absl::StatusOr<kiln::HostTensor> tensor = (*weights)->load(op.getName());
    if (!tensor.ok())
      checkMessage(path, tensor.status().message());
  });
  return 0;
}
