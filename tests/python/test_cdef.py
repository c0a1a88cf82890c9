"""The generated C declarations: current with include/ctrain/ (regenerate: python3 python/ctrain/_gen_cdef.py),
and cffi's struct layouts equal the C compiler's (ABI mode computes them itself)."""
import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT

STRUCTS = ["ct_recipe", "ct_train_opts", "ct_train_result", "ct_train_state", "ct_metrics_step", "ct_task_eval",
           "ct_tensor", "ct_compile_opts", "ct_gpt_config", "ct_recipe_key_info", "ct_dataset", "ct_pool2d_opts"]


def _cc():
    cc = os.environ.get("CC", "cc")
    if not shutil.which(cc):
        pytest.skip("no C compiler")
    return cc


def test_cdef_is_current():
    _cc()
    gen = os.path.join(ROOT, "python", "ctrain", "_gen_cdef.py")
    r = subprocess.run([sys.executable, gen, "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_struct_layouts_match_the_compiler(tmp_path):
    cc = _cc()
    from ctrain import ffi
    src = tmp_path / "sizes.c"
    src.write_text('#include <stdio.h>\n#include "ctrain/ctrain.h"\nint main(void) {\n'
                   + "".join('    printf("%%zu\\n", sizeof(%s));\n' % s for s in STRUCTS) + "    return 0;\n}\n")
    exe = tmp_path / "sizes"
    subprocess.run([cc, "-std=c11", "-I", os.path.join(ROOT, "include"), str(src), "-o", str(exe)], check=True)
    c_sizes = [int(v) for v in subprocess.run([str(exe)], capture_output=True, text=True).stdout.split()]
    assert c_sizes == [ffi.sizeof(s) for s in STRUCTS]
    assert ffi.offsetof("ct_recipe", "fit_allow_bf16") + ffi.sizeof("int") <= ffi.sizeof("ct_recipe")
