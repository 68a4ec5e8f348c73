"""Builds CUDA C with nvcc into a fatbin (SASS for each GPU generation mk supports, plus PTX) and embeds it in a C library."""

# nvcc: $NVCC, else nvcc on PATH, else $CUDA_PATH/bin/nvcc, where CUDA_PATH defaults to
# /usr/local/cuda. .bazelrc passes NVCC and CUDA_PATH through to the actions.
NVCC = "$$(if [ -n \"$${NVCC:-}\" ]; then echo \"$$NVCC\"; elif command -v nvcc >/dev/null 2>&1; then command -v nvcc; else echo \"$${CUDA_PATH:-/usr/local/cuda}/bin/nvcc\"; fi)"

# Machine code for A100 (sm_80), RTX 30xx/A10/A40 (sm_86), L4/L40/RTX 40xx (sm_89) and H100/H200
# (sm_90); compute_80 PTX lets the driver compile for any newer GPU. The driver picks from the
# fatbin: the SASS of the device's generation when there is one, else the PTX.
SASS_ARCHS = ["80", "86", "89", "90"]
PTX_ARCH = "80"

def mk_cuda_module(name, src, hdrs = [], symbol = None, visibility = None, sass_archs = SASS_ARCHS, ptx_arch = PTX_ARCH, nvcc_flags = []):
    """cc_library `name` defining <symbol>_fatbin and <symbol>_fatbin_size.

    src is the one .cu translation unit; hdrs are what it includes (from the workspace root);
    ptx_arch None leaves the PTX out (the module then runs only on its SASS archs)."""
    symbol = symbol or name
    flags = " ".join(["-O3", "-std=c++17", "-I.", "-lineinfo"] + nvcc_flags)
    ptx = [ptx_arch] if ptx_arch else []
    gencode = " ".join(
        ["-gencode arch=compute_%s,code=sm_%s" % (a, a) for a in sass_archs] +
        ["-gencode arch=compute_%s,code=compute_%s" % (a, a) for a in ptx],
    )
    native.genrule(
        name = name + "_fatbin",
        srcs = [src] + hdrs,
        outs = [name + ".fatbin"],
        cmd = "%s %s -fatbin %s -o $@ $(location %s)" % (NVCC, flags, gencode, src),
    )
    awk = "awk '{for(i=1;i<=NF;i++) printf \"0x%s,\", $$i; print \"\"}'"
    native.genrule(
        name = name + "_embed",
        srcs = [":" + name + ".fatbin"],
        outs = [name + "_embed.c"],
        cmd = " && ".join([
            "(echo '/* Generated from %s by nvcc: do not edit. */'" % src,
            "echo '#include <stddef.h>'",
            # The driver reads a fatbin in 8-byte words; an ELF inside it wants more.
            "echo '_Alignas(256) const unsigned char %s_fatbin[] = {'" % symbol,
            "od -An -v -tx1 $(location :%s.fatbin) | %s" % (name, awk),
            "echo '};'",
            "echo 'const size_t %s_fatbin_size = sizeof %s_fatbin;'" % (symbol, symbol),
            "echo 'const char %s_archs[] = \"%s\";') > $@" % (symbol, " ".join(["sm_" + a for a in sass_archs] + ["compute_" + a for a in ptx])),
        ]),
    )
    native.cc_library(
        name = name,
        srcs = [":" + name + "_embed.c"],
        copts = ["-w"],
        visibility = visibility,
    )
