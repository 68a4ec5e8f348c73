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
