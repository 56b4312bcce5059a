import numpy as np
import pytest

from lab.bench.complexity import MIN_POINTS, PowerLawFit, fit_power_law, scaling_name

SIZES = np.array([50, 100, 200, 400, 800, 1600])


@pytest.mark.parametrize("k", [1.0, 2.0])
def test_recovers_exponent_of_noisy_power_law(k):
    rng = np.random.default_rng(0)
    latency = 0.3 * SIZES**k * rng.lognormal(0.0, 0.05, SIZES.size)
    fit = fit_power_law(SIZES, latency)
    assert isinstance(fit, PowerLawFit)
    assert abs(fit.k - k) < 0.05
    assert fit.c == pytest.approx(0.3, rel=0.3)
    assert fit.r2 > 0.99
    k_, c_, r2_ = fit
    assert (k_, c_, r2_) == (fit.k, fit.c, fit.r2)


def test_exact_fit_predicts_and_describes():
    fit = fit_power_law([1, 2, 4, 8], [3, 12, 48, 192])
    assert fit.k == pytest.approx(2.0) and fit.c == pytest.approx(3.0)
    assert fit.r2 == pytest.approx(1.0)
    assert fit.predict(16) == pytest.approx(768)
    assert "n^2.00" in fit.describe() and "quadratic" in fit.describe()
    assert [scaling_name(k) for k in (0.1, 1.1, 1.9, 3.0)] == [
        "about constant",
        "about linear",
        "about quadratic",
        "worse than quadratic",
    ]


def test_constant_latency_is_exponent_zero():
    fit = fit_power_law([10, 100, 1000, 10000], [5.0, 5.0, 5.0, 5.0])
    assert fit.k == pytest.approx(0.0, abs=1e-9) and fit.r2 == 1.0


@pytest.mark.parametrize(
    ("n", "y", "match"),
    [
        ([1, 2], [1.0], "equal-length"),
        ([5], [1.0], "at least 4 distinct sizes, got 1"),
        ([0, 2, 4, 8], [1.0, 2.0, 3.0, 4.0], "> 0"),
        ([1, 2, 4, 8], [1.0, 2.0, 3.0, float("nan")], "finite"),
        ([3, 3, 3, 3], [1.0, 2.0, 3.0, 4.0], "got 1"),
    ],
)
def test_bad_input_is_a_value_error(n, y, match):
    with pytest.raises(ValueError, match=match):
        fit_power_law(n, y)


@pytest.mark.parametrize("n", [[10, 20], [10, 20, 40], [10, 10, 20, 20, 40, 40]])
def test_fewer_than_four_sizes_get_no_exponent(n):
    """Two points fit any line with R^2 1; repeats of three sizes are still three sizes."""
    assert MIN_POINTS == 4
    with pytest.raises(ValueError, match="at least 4 distinct sizes"):
        fit_power_law(n, [float(v) ** 1.3 for v in n])
