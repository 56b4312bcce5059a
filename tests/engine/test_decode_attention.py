"""The real-length decode attention kernel gives what the key bucket's attention gives (the
checks are in `decode_attention_checks.py`; without a GPU they run under Triton's
interpreter, see `tests/kernel_checks.py`)."""

from pathlib import Path

import pytest

from tests.kernel_checks import run_check

CHECKS = Path(__file__).with_name("decode_attention_checks.py")


@pytest.mark.parametrize("check", ["kernel_matches_reference",
                                   "fp8_kernel_matches_the_dequantized_reference",
                                   "decode_step_matches_the_key_bucket",
                                   "compiled_step_matches_eager",
                                   "compiled_mixed_step_writes_the_cache_in_place"])
def test_real_length_attention(check):
    run_check(CHECKS, check)
