"""The server's allocator cap: on glibc the arena limit is taken; elsewhere it says why not."""

import platform

from lab.serve.allocator import cap_arenas


def test_glibc_takes_the_arena_cap_and_says_so():
    message = cap_arenas(2)
    if platform.libc_ver()[0] == "glibc":
        assert message == "malloc arenas capped at 2"
    else:
        assert message.startswith("malloc arenas left as they are")

