"""A test that could not use a real part fails under CI and is counted everywhere.

Each case is a real inner pytest run (pytester) of a small module with the plugin loaded
as the suite loads it.
"""

from __future__ import annotations

import pytest

SKIPPING_MODULE = """
import pytest

@pytest.fixture(scope="session")
def ray_part():
    pytest.skip("not checked: Ray is not installed (No module named 'ray')")

def test_needs_postgres():
    pytest.skip("not checked: PostgreSQL is not installed (initdb not found; make postgres)")

def test_needs_ray(ray_part):
    pass

def test_needs_ray_too(ray_part):
    pass

def test_skips_for_another_reason():
    pytest.skip("seed release notes not present")

def test_checks_something():
    assert 1 + 1 == 2
"""

RAY_LINE = "Ray is not installed (No module named 'ray') (2)"
POSTGRES_LINE = "PostgreSQL is not installed (initdb not found; make postgres) (1)"


def test_under_ci_a_test_skipped_for_a_missing_real_part_fails_naming_the_part(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 28 item 6: under CI=true a "not checked" skip fails the run, naming the part."""
    monkeypatch.setenv("CI", "true")
    pytester.makepyfile(test_parts=SKIPPING_MODULE)
    result = pytester.runpytest("-p", "real_parts", "-ra")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    # The PostgreSQL skip came from the test's body, Ray's from its fixture (setup).
    # The skip for another reason fails too: it is on no allow-list.
    result.assert_outcomes(passed=1, failed=2, errors=2)
    for line in (
        "ERROR*test_needs_ray - CI=true, and this test could not use a real part: Ray is*",
        "FAILED*test_needs_postgres - CI=true, *could not use a real part: PostgreSQL is*",
        "FAILED*test_skips_for_another_reason - CI=true, and this test skipped (seed*",
    ):
        result.stdout.fnmatch_lines([line])
    result.stdout.fnmatch_lines([f"3 real-part tests not checked: {RAY_LINE}; {POSTGRES_LINE}"])


def test_under_ci_a_skip_passes_only_on_the_allow_list_with_its_reason(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 38 item 7: under CI any skip fails unless it is on ALLOWED_SKIPS, matched by the
    test and the start of its reason (the same test skipping for another reason still fails)."""
    import real_parts

    monkeypatch.setenv("CI", "true")
    allowed = {("test_parts.py::test_skips_for_another_reason", "seed release notes"): "why"}
    monkeypatch.setattr(real_parts, "ALLOWED_SKIPS", allowed)
    pytester.makepyfile(
        test_parts="""
        import pytest

        def test_skips_for_another_reason():
            pytest.skip("seed release notes not present")

        def test_skips_for_yet_another_reason():
            pytest.skip("seed release notes not present")
        """
    )
    result = pytester.runpytest("-p", "real_parts")
    result.assert_outcomes(skipped=1, failed=1)
    result.stdout.fnmatch_lines(["FAILED*test_skips_for_yet_another_reason - CI=true*"])


def test_the_allow_list_is_short_and_gives_a_reason_for_each_skip() -> None:
    """Issue 38 item 7: each skip CI accepts says why, and there are few."""
    import real_parts

    assert len(real_parts.ALLOWED_SKIPS) <= 5
    assert all(why.strip() for why in real_parts.ALLOWED_SKIPS.values())


def test_without_ci_such_tests_skip_and_the_summary_counts_them_by_reason(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 28 item 6: off CI the skips stay skips, and one line counts them by reason."""
    monkeypatch.delenv("CI", raising=False)
    pytester.makepyfile(test_parts=SKIPPING_MODULE)
    result = pytester.runpytest("-p", "real_parts")
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=1, skipped=4)
    result.stdout.fnmatch_lines([f"3 real-part tests not checked: {RAY_LINE}; {POSTGRES_LINE}"])


def test_a_module_skipped_whole_for_a_missing_part_fails_its_collection_under_ci(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 28 item 6: a module-level "not checked" skip is no way around the rule."""
    monkeypatch.setenv("CI", "true")
    pytester.makepyfile(
        test_browser="""
        import pytest
        pytest.skip("not checked: Debian chromium is not installed", allow_module_level=True)

        def test_renders():
            pass
        """
    )
    result = pytester.runpytest("-p", "real_parts")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        [
            "*real part: Debian chromium is not installed*",
            "1 real-part tests not checked: Debian chromium is not installed (1)",
        ]
    )


def test_a_run_that_checked_every_part_says_so(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 28 item 6: the count is printed when it is zero too, so its absence is news."""
    monkeypatch.setenv("CI", "true")
    pytester.makepyfile(test_plain="def test_passes():\n    pass\n")
    result = pytester.runpytest("-p", "real_parts")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["0 real-part tests not checked"])
