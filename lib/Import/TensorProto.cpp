//===- TensorProto.cpp - ONNX TensorProto <-> HostTensor ------------------===//

#include "kiln/Import/TensorProto.h"

#include "absl/strings/str_cat.h"
#include "onnx/onnx_pb.h"
#include "llvm/ADT/APFloat.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace kiln {

absl::StatusOr<DType> dtypeFromOnnx(int onnxType) {
  switch (onnxType) {
  case onnx::TensorProto::FLOAT: return DType::F32;
  case onnx::TensorProto::DOUBLE: return DType::F64;
  case onnx::TensorProto::FLOAT16: return DType::F16;
  case onnx::TensorProto::BFLOAT16: return DType::BF16;
  case onnx::TensorProto::BOOL: return DType::Bool;
  case onnx::TensorProto::INT8: return DType::I8;
  case onnx::TensorProto::UINT8: return DType::U8;
  case onnx::TensorProto::UINT16: return DType::U16;
  case onnx::TensorProto::UINT32: return DType::U32;
  case onnx::TensorProto::UINT64: return DType::U64;
  case onnx::TensorProto::INT16: return DType::I16;
  case onnx::TensorProto::INT32: return DType::I32;
  case onnx::TensorProto::INT64: return DType::I64;
  default:
    return absl::InvalidArgumentError(absl::StrCat(
        "unsupported tensor element type ",
        onnx::TensorProto::DataType_Name(static_cast<onnx::TensorProto::DataType>(onnxType)), " (",
        onnxType, ")"));
  }
}

int dtypeToOnnx(DType dtype) {
  switch (dtype) {
  case DType::F32: return onnx::TensorProto::FLOAT;
  case DType::F64: return onnx::TensorProto::DOUBLE;
  case DType::F16: return onnx::TensorProto::FLOAT16;
  case DType::BF16: return onnx::TensorProto::BFLOAT16;
  case DType::Bool: return onnx::TensorProto::BOOL;
  case DType::I8: return onnx::TensorProto::INT8;
  case DType::U8: return onnx::TensorProto::UINT8;
  case DType::U16: return onnx::TensorProto::UINT16;
  case DType::U32: return onnx::TensorProto::UINT32;
  case DType::U64: return onnx::TensorProto::UINT64;
  case DType::I16: return onnx::TensorProto::INT16;
  case DType::I32: return onnx::TensorProto::INT32;
  case DType::I64: return onnx::TensorProto::INT64;
  }
  return onnx::TensorProto::UNDEFINED;
}

static size_t byteWidth(DType dtype) {
  switch (dtype) {
  case DType::F64:
  case DType::I64:
  case DType::U64: return 8;
  case DType::F32:
  case DType::I32:
  case DType::U32: return 4;
  case DType::F16:
  case DType::BF16:
  case DType::I16:
  case DType::U16: return 2;
  default: return 1;
  }
}

static double halfBitsToDouble(DType dtype, uint16_t bits) {
  const llvm::fltSemantics &semantics =
      dtype == DType::F16 ? llvm::APFloat::IEEEhalf() : llvm::APFloat::BFloat();
  llvm::APFloat value(semantics, llvm::APInt(16, bits));
  bool losesInfo = false;
  value.convert(llvm::APFloat::IEEEdouble(), llvm::APFloat::rmNearestTiesToEven, &losesInfo);
  return value.convertToDouble();
}

static uint16_t doubleToHalfBits(DType dtype, double v) {
  llvm::APFloat value(v);
  bool losesInfo = false;
  value.convert(dtype == DType::F16 ? llvm::APFloat::IEEEhalf() : llvm::APFloat::BFloat(),
                llvm::APFloat::rmNearestTiesToEven, &losesInfo);
  return static_cast<uint16_t>(value.bitcastToAPInt().getZExtValue());
}

/// Decodes little-endian element `i` of `bytes`.
static void decodeRaw(HostTensor &tensor, const char *bytes) {
  int64_t n = tensor.numel();
  for (int64_t i = 0; i < n; ++i) {
    const char *p = bytes + i * byteWidth(tensor.dtype);
    switch (tensor.dtype) {
    case DType::F32: {
      float v;
      std::memcpy(&v, p, 4);
      tensor.floats[i] = v;
      break;
    }
    case DType::F64: {
      double v;
      std::memcpy(&v, p, 8);
      tensor.floats[i] = v;
      break;
    }
    case DType::F16:
    case DType::BF16: {
      uint16_t bits;
      std::memcpy(&bits, p, 2);
      tensor.floats[i] = halfBitsToDouble(tensor.dtype, bits);
      break;
    }
    case DType::Bool: tensor.ints[i] = *p != 0; break;
    case DType::I8: tensor.ints[i] = static_cast<int8_t>(*p); break;
    case DType::U8: tensor.ints[i] = static_cast<uint8_t>(*p); break;
    case DType::U16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      tensor.ints[i] = v;
      break;
    }
    case DType::U32: {
      uint32_t v;
      std::memcpy(&v, p, 4);
      tensor.ints[i] = v;
      break;
    }
    case DType::U64: {
      uint64_t v;
      std::memcpy(&v, p, 8);
      tensor.ints[i] = static_cast<int64_t>(v);
      break;
    }
    case DType::I16: {
      int16_t v;
      std::memcpy(&v, p, 2);
      tensor.ints[i] = v;
      break;
    }
    case DType::I32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      tensor.ints[i] = v;
      break;
    }
    case DType::I64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      tensor.ints[i] = v;
      break;
    }
    }
  }
}

/// The file an external data `location` names, which must lie inside
/// `baseDir` (the model's or the input file's folder): absolute locations
/// and `..` components are refused before anything is opened, and a path
/// that exists is canonicalized so a symlink cannot lead outside either.
/// A missing file keeps its lexical path (the caller reports it).
static absl::StatusOr<std::string> resolveExternalDataPath(const std::string &baseDir,
                                                           const std::string &location,
                                                           const std::string &tensorName) {
  auto outside = [&](llvm::StringRef why) {
    return absl::PermissionDeniedError(
        absl::StrCat("initializer '", tensorName, "': external data file '", location,
                     "' is outside the folder '", baseDir, "' (", why.str(), ")"));
  };
  if (baseDir.empty())
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", tensorName,
                     "' has external data, which only initializers and input files may have"));
  if (location.find('\0') != std::string::npos)
    return outside("the location holds a NUL byte");
  if (llvm::sys::path::is_absolute(location) || llvm::sys::path::has_root_name(location) ||
      llvm::sys::path::has_root_directory(location))
    return outside("an absolute path");
  for (llvm::StringRef part :
       llvm::make_range(llvm::sys::path::begin(location), llvm::sys::path::end(location)))
    if (part == "..")
      return outside("a '..' component");
  llvm::SmallString<256> path(baseDir);
  llvm::sys::path::append(path, location);
  if (!llvm::sys::fs::exists(path))
    return path.str().str();
  llvm::SmallString<256> realBase, realPath;
  if (llvm::sys::fs::real_path(baseDir, realBase) || llvm::sys::fs::real_path(path, realPath))
    return path.str().str(); // Unreadable: opening reports it.
  llvm::StringRef inner(realPath);
  bool baseIsRoot = llvm::sys::path::is_separator(realBase.back());
  if (!inner.consume_front(realBase) || inner.empty() ||
      (!baseIsRoot && !llvm::sys::path::is_separator(inner.front())))
    return outside(absl::StrCat("it resolves to '", realPath.str().str(), "'"));
  if (!llvm::sys::fs::is_regular_file(realPath))
    return absl::InvalidArgumentError(absl::StrCat("initializer '", tensorName,
                                                   "': external data file '", path.str().str(),
                                                   "' is not a regular file"));
  return realPath.str().str();
}

static absl::StatusOr<std::string>
readExternalData(const onnx::TensorProto &proto, const std::string &baseDir, size_t expectedBytes) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto &entry : proto.external_data()) {
    if (entry.key() == "location")
      location = entry.value();
    else if (entry.key() == "offset" || entry.key() == "length") {
      // Not std::stoll: it throws on garbage.
      int64_t &field = entry.key() == "offset" ? offset : length;
      if (llvm::StringRef(entry.value()).getAsInteger(10, field) || field < 0)
        return absl::InvalidArgumentError(absl::StrCat("initializer '", proto.name(),
                                                       "' has an invalid external data ",
                                                       entry.key(), " '", entry.value(), "'"));
    }
  }
  if (location.empty())
    return absl::InvalidArgumentError(
        absl::StrCat("initializer '", proto.name(), "' has external data without a location"));
  absl::StatusOr<std::string> resolved = resolveExternalDataPath(baseDir, location, proto.name());
  if (!resolved.ok())
    return resolved.status();
  // Messages name the file as the model spells it; the canonical path is
  // what is opened.
  llvm::SmallString<256> path(baseDir);
  llvm::sys::path::append(path, location);
  std::ifstream file(*resolved, std::ios::binary);
  if (!file)
    return absl::NotFoundError(absl::StrCat("external data file '", path.str().str(),
                                            "' of initializer '", proto.name(),
                                            "' cannot be opened"));
  if (length < 0)
    length = static_cast<int64_t>(expectedBytes);
  if (static_cast<size_t>(length) != expectedBytes)
    return absl::InvalidArgumentError(absl::StrCat("initializer '", proto.name(),
                                                   "' external data has ", length,
                                                   " bytes, expected ", expectedBytes));
  uint64_t fileSize = 0;
  if (offset < 0 || llvm::sys::fs::file_size(*resolved, fileSize) ||
      static_cast<uint64_t>(offset) + expectedBytes > fileSize)
    return absl::OutOfRangeError(
        absl::StrCat("external data file '", path.str().str(), "' ends before initializer '",
                     proto.name(), "' (offset ", offset, ", ", expectedBytes, " bytes)"));
  std::string bytes(expectedBytes, '\0');
  file.seekg(offset);
  file.read(bytes.data(), static_cast<std::streamsize>(expectedBytes));
  if (file.gcount() != static_cast<std::streamsize>(expectedBytes))
    return absl::OutOfRangeError(
        absl::StrCat("external data file '", path.str().str(), "' ends before initializer '",
                     proto.name(), "' (offset ", offset, ", ", expectedBytes, " bytes)"));
  return bytes;
}

std::string folderOf(const std::string &path) {
  std::string dir = llvm::sys::path::parent_path(path).str();
  return dir.empty() ? "." : dir;
}

absl::StatusOr<HostTensor> tensorFromProto(const onnx::TensorProto &proto,
                                           const std::string &baseDir) {
  absl::StatusOr<DType> dtype = dtypeFromOnnx(proto.data_type());
  if (!dtype.ok())
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", proto.name(), "': ", dtype.status().message()));
  std::vector<int64_t> shape(proto.dims().begin(), proto.dims().end());
  // Count elements without overflow before allocating anything: a corrupt
  // file must give an error, not an out-of-memory abort.
  constexpr uint64_t kMaxElements = uint64_t(1) << 40;
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0)
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", proto.name(), "' has a negative dim"));
    if (d != 0 && n > kMaxElements / static_cast<uint64_t>(d))
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", proto.name(), "' has too many elements"));
    n *= static_cast<uint64_t>(d);
  }
  size_t bytes = n * byteWidth(*dtype);
  auto shapeString = [&] {
    std::string text = "[";
    for (size_t i = 0; i < shape.size(); ++i)
      text += (i ? ", " : "") + std::to_string(shape[i]);
    return text + "]";
  };
  auto sizeError = [&](size_t found) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", proto.name(), "' holds ", found,
                                                   " values for shape ", shapeString()));
  };
  // How many values the tensor's data actually holds.
  size_t available;
  if (proto.data_location() == onnx::TensorProto::EXTERNAL)
    available = n; // readExternalData checks the file's byte count.
  else if (proto.has_raw_data())
    available = proto.raw_data().size() == bytes ? n : proto.raw_data().size() / byteWidth(*dtype);
  else if (*dtype == DType::F32)
    available = proto.float_data_size();
  else if (*dtype == DType::F64)
    available = proto.double_data_size();
  else if (*dtype == DType::I64)
    available = proto.int64_data_size();
  else if (*dtype == DType::U32 || *dtype == DType::U64)
    available = proto.uint64_data_size();
  else
    available = proto.int32_data_size();
  if (available != n || (proto.has_raw_data() && proto.raw_data().size() != bytes))
    return sizeError(available);
  // External bytes are read (their count checked against the file) before
  // the tensor is allocated: dims alone may claim gigabytes.
  absl::StatusOr<std::string> raw;
  if (proto.data_location() == onnx::TensorProto::EXTERNAL) {
    raw = readExternalData(proto, baseDir, bytes);
    if (!raw.ok())
      return raw.status();
  }
  HostTensor tensor(*dtype, shape);

  if (proto.data_location() == onnx::TensorProto::EXTERNAL) {
    decodeRaw(tensor, raw->data());
    return tensor;
  }
  if (proto.has_raw_data()) {
    decodeRaw(tensor, proto.raw_data().data());
    return tensor;
  }
  switch (*dtype) {
  case DType::F32:
    if (static_cast<size_t>(proto.float_data_size()) != n)
      return sizeError(proto.float_data_size());
    for (size_t i = 0; i < n; ++i)
      tensor.floats[i] = proto.float_data(i);
    break;
  case DType::F64:
    if (static_cast<size_t>(proto.double_data_size()) != n)
      return sizeError(proto.double_data_size());
    for (size_t i = 0; i < n; ++i)
      tensor.floats[i] = proto.double_data(i);
    break;
  case DType::I64:
    for (size_t i = 0; i < n; ++i)
      tensor.ints[i] = proto.int64_data(i);
    break;
  case DType::U32:
  case DType::U64:
    for (size_t i = 0; i < n; ++i)
      tensor.ints[i] = static_cast<int64_t>(proto.uint64_data(i));
    break;
  default: // Narrower types travel in int32_data (halves as their bits).
    if (static_cast<size_t>(proto.int32_data_size()) != n)
      return sizeError(proto.int32_data_size());
    for (size_t i = 0; i < n; ++i) {
      int32_t v = proto.int32_data(i);
      if (tensor.isFloat())
        tensor.floats[i] = halfBitsToDouble(*dtype, static_cast<uint16_t>(v));
      else
        tensor.ints[i] = wrapToInt(*dtype, v);
    }
  }
  return tensor;
}

void tensorToProto(const HostTensor &tensor, const std::string &name, onnx::TensorProto &proto) {
  proto.Clear();
  proto.set_name(name);
  proto.set_data_type(dtypeToOnnx(tensor.dtype));
  for (int64_t d : tensor.shape)
    proto.add_dims(d);
  std::string raw(static_cast<size_t>(tensor.numel()) * byteWidth(tensor.dtype), '\0');
  for (int64_t i = 0, n = tensor.numel(); i < n; ++i) {
    char *p = raw.data() + i * byteWidth(tensor.dtype);
    switch (tensor.dtype) {
    case DType::F32: {
      float v = static_cast<float>(tensor.floats[i]);
      std::memcpy(p, &v, 4);
      break;
    }
    case DType::F64: std::memcpy(p, &tensor.floats[i], 8); break;
    case DType::F16:
    case DType::BF16: {
      uint16_t bits = doubleToHalfBits(tensor.dtype, tensor.floats[i]);
      std::memcpy(p, &bits, 2);
      break;
    }
    case DType::Bool:
    case DType::I8:
    case DType::U8: *p = static_cast<char>(tensor.ints[i]); break;
    case DType::I16: {
      int16_t v = static_cast<int16_t>(tensor.ints[i]);
      std::memcpy(p, &v, 2);
      break;
    }
    case DType::I32: {
      int32_t v = static_cast<int32_t>(tensor.ints[i]);
      std::memcpy(p, &v, 4);
      break;
    }
    case DType::I64:
    case DType::U64: std::memcpy(p, &tensor.ints[i], 8); break;
    case DType::U16: {
      uint16_t v = static_cast<uint16_t>(tensor.ints[i]);
      std::memcpy(p, &v, 2);
      break;
    }
    case DType::U32: {
      uint32_t v = static_cast<uint32_t>(tensor.ints[i]);
      std::memcpy(p, &v, 4);
      break;
    }
    }
  }
  proto.set_raw_data(raw);
}

absl::StatusOr<HostTensor> readTensorFile(const std::string &path) {
  std::ifstream file(path, std::ios::binary);
  if (!file)
    return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  onnx::TensorProto proto;
  if (!proto.ParseFromIstream(&file))
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a valid TensorProto (truncated or corrupt)"));
  absl::StatusOr<HostTensor> tensor = tensorFromProto(proto, folderOf(path));
  if (!tensor.ok())
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", tensor.status().message()));
  return tensor;
}

absl::Status writeTensorFile(const std::string &path, const HostTensor &tensor,
                             const std::string &name) {
  onnx::TensorProto proto;
  tensorToProto(tensor, name, proto);
  std::string temp = path + ".tmp";
  {
    std::ofstream file(temp, std::ios::binary | std::ios::trunc);
    if (!file || !proto.SerializeToOstream(&file))
      return absl::UnavailableError(absl::StrCat(temp, ": cannot write"));
    file.flush();
    if (!file)
      return absl::UnavailableError(absl::StrCat(temp, ": write failed"));
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0)
    return absl::UnavailableError(
        absl::StrCat(path, ": cannot rename from ", temp, ": ", std::strerror(errno)));
  return absl::OkStatus();
}

} // namespace kiln
