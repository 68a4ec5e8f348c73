"""Compiler flags shared by every C target of mk."""

MK_COPTS = [
    "-std=c11",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-Wno-unused-parameter",
    "-D_GNU_SOURCE",
    "-fno-strict-aliasing",
    # Error messages are deliberately cut to their fixed buffers.
    "-Wno-format-truncation",
]

MK_LINKOPTS = [
    "-lpthread",
    "-lm",
    "-ldl",
]

# The layers, lowest first (ARCHITECTURE.md). A target is visible only to the layers above its
# own, so a `deps` that points down is the only kind Bazel accepts; tests/layers_check.py checks
# the #includes the same way.
MK_ABOVE_CORE = [
    "//megakernel:__pkg__",
    "//graph:__pkg__",
    "//hostqueue:__pkg__",
    "//runtime:__pkg__",
    "//tools:__pkg__",
    "//tests:__pkg__",
]
MK_ABOVE_MEGAKERNEL = MK_ABOVE_CORE[1:]
MK_ABOVE_GRAPH = MK_ABOVE_CORE[2:]
MK_ABOVE_HOSTQUEUE = MK_ABOVE_CORE[3:]
MK_ABOVE_RUNTIME = MK_ABOVE_CORE[4:]
