# -*- Python -*-
import os

import lit.formats
from lit.llvm import llvm_config

config.name = "Kiln"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test", ".onnxtxt"]
config.excludes = ["Inputs", "utils", "fixtures", "CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py",
                   "Unit"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.kiln_obj_root, "test")

config.environment["FILECHECK_OPTS"] = "-enable-var-scope --allow-unused-prefixes=false"
config.substitutions.append(("%fixtures", os.path.join(config.kiln_src_root, "test", "fixtures")))
config.substitutions.append(("%PYTHON", config.python_executable))
config.substitutions.append(("%compare", config.python_executable + " " + os.path.join(config.kiln_src_root, "test", "utils", "compare_tensors.py")))

# ONNX Runtime (PyPI) computes independent references for some tests.
try:
    import importlib.util
    if importlib.util.find_spec("onnxruntime"):
        config.available_features.add("onnxruntime")
except ImportError:
    pass

# torch, transformers, onnxscript and safetensors (PyPI): scripts/export_hf.py runs.
try:
    import importlib.util
    if all(importlib.util.find_spec(m) for m in ("torch", "transformers", "onnxscript", "safetensors")):
        config.available_features.add("hf-export")
except ImportError:
    pass

# torch (PyPI): bench/nf4.py against Kiln's NF4 codes (test/Quant/nf4-bench-codes.test).
try:
    import importlib.util
    if importlib.util.find_spec("torch"):
        config.available_features.add("torch")
except ImportError:
    pass

# peft (PyPI): the PEFT round trip of test/HF/peft-roundtrip.test.
try:
    import importlib.util
    if importlib.util.find_spec("peft"):
        config.available_features.add("peft")
except ImportError:
    pass

# clang-format (Debian's, 14): test/Tools/format-script.test runs scripts/format.sh.
import shutil
if shutil.which("clang-format"):
    config.available_features.add("clang-format")

# kiln-fuzz-onnx exists (KILN_BUILD_FUZZER): test/Fuzz runs it.
if getattr(config, "kiln_build_fuzzer", 0):
    config.available_features.add("fuzzer")

llvm_config.with_system_environment(["HOME", "TMP", "TEMP"])
llvm_config.use_default_substitutions()

tool_dirs = [config.kiln_tools_dir, config.llvm_tools_dir]
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.with_environment("PATH", config.kiln_tools_dir, append_path=True)
llvm_config.add_tool_substitutions(["kiln-opt", "not", "count", "split-file"], tool_dirs)

config.substitutions.append(("%kiln_src", config.kiln_src_root))
config.substitutions.append(("%kiln_version", config.kiln_version))
# Debian's libonnx-testdata: the ONNX backend node tests.
onnx_node_tests = "/usr/share/libonnx-testdata/data/node"
if os.path.isdir(onnx_node_tests):
    config.available_features.add("onnx-node-tests")
    config.substitutions.append(("%onnx_node_tests", onnx_node_tests))
