"""Builds CUDA C into PTX (plus an sm_90 cubin) with nvcc and embeds both in a C library."""

NVCC = "$${NVCC:-/usr/local/cuda/bin/nvcc}"

def mk_cuda_module(name, src, hdrs = [], symbol = None, visibility = None, ptx_arch = "compute_80", cubin_arch = "sm_90", nvcc_flags = []):
    """cc_library `name` defining <symbol>_ptx/_ptx_size (NUL-terminated) and <symbol>_cubin/_cubin_size.

    src is the one .cu translation unit; hdrs are what it includes (from the workspace root)."""
    symbol = symbol or name
    flags = " ".join(["-O3", "-std=c++17", "-I.", "-lineinfo"] + nvcc_flags)
    native.genrule(
        name = name + "_ptx",
        srcs = [src] + hdrs,
        outs = [name + ".ptx"],
        cmd = "%s %s -ptx -arch=%s -o $@ $(location %s)" % (NVCC, flags, ptx_arch, src),
    )
    native.genrule(
        name = name + "_cubin",
        srcs = [src] + hdrs,
        outs = [name + ".cubin"],
        cmd = "%s %s -cubin -arch=%s -o $@ $(location %s)" % (NVCC, flags, cubin_arch, src),
    )
    awk = "awk '{for(i=1;i<=NF;i++) printf \"0x%s,\", $$i; print \"\"}'"
    native.genrule(
        name = name + "_embed",
        srcs = [":" + name + ".ptx", ":" + name + ".cubin"],
        outs = [name + "_embed.c"],
        cmd = " && ".join([
            "(echo '/* Generated from %s by nvcc: do not edit. */'" % src,
            "echo '#include <stddef.h>'",
            "echo 'const unsigned char %s_ptx[] = {'" % symbol,
            "od -An -v -tx1 $(location :%s.ptx) | %s" % (name, awk),
            "echo '0x00};'",
            "echo 'const size_t %s_ptx_size = sizeof %s_ptx;'" % (symbol, symbol),
            "echo 'const unsigned char %s_cubin[] = {'" % symbol,
            "od -An -v -tx1 $(location :%s.cubin) | %s" % (name, awk),
            "echo '};'",
            "echo 'const size_t %s_cubin_size = sizeof %s_cubin;') > $@" % (symbol, symbol),
        ]),
    )
    native.cc_library(
        name = name,
        srcs = [":" + name + "_embed.c"],
        copts = ["-w"],
        visibility = visibility,
    )
