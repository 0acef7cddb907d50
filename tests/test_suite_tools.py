"""The suite's own tools: markers from fixtures, the time per kind and module, and session
fixtures stopped after their last test. Each case is a real inner pytest run (pytester)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

PLUGINS = ("-p", "auto_marks", "-p", "suite_time", "-p", "early_stop")


def test_a_session_fixture_stops_right_after_its_last_test_not_at_the_session_end(
    pytester: pytest.Pytester,
) -> None:
    """Issue 39 item 2: a cluster the later modules do not use is not kept up through them;
    it stops when the module of its last test ends, after that module's own fixtures."""
    pytester.makeconftest(
        """
        import pytest
        from early_stop import stop_after_last_use

        EVENTS = []

        @pytest.fixture(scope="session")
        def cluster(request):
            EVENTS.append("start")
            stop = stop_after_last_use(request, lambda: EVENTS.append("stop"))
            yield "up"
            stop()
            EVENTS.append("session end")
        """
    )
    pytester.makepyfile(
        test_a_uses="""
        import pytest
        from conftest import EVENTS

        @pytest.fixture(scope="module")
        def on_the_cluster(cluster):
            yield
            EVENTS.append("module fixture gone")

        def test_one(on_the_cluster):
            pass

        def test_two(cluster):
            pass

        def test_three_in_the_same_module():
            assert EVENTS == ["start"]
        """,
        test_b_later="""
        from conftest import EVENTS

        def test_after():
            assert EVENTS == ["start", "module fixture gone", "stop"]
        """,
    )
    result = pytester.runpytest(*PLUGINS)
    result.assert_outcomes(passed=4)


def test_markers_come_from_the_fixtures_a_test_uses_and_select_the_fast_tests(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    """Issue 39 item 5: a test that asks for a real environment (even through another
    fixture) is marked torch_envs without its author saying so; the times name its kind."""
    pytester.makeconftest(
        """
        import pytest

        @pytest.fixture
        def baseline_env():
            return "env"

        @pytest.fixture
        def uses_env(baseline_env):
            return baseline_env

        @pytest.fixture
        def ray_cluster():
            return "ray"
        """
    )
    pytester.makeini("[pytest]\nmarkers =\n    torch_envs: t\n    ray: r\n")
    pytester.makepyfile(
        test_kinds="""
        def test_logic():
            pass

        def test_worker(uses_env):
            pass

        def test_fleet(ray_cluster, baseline_env):
            pass
        """
    )
    times = tmp_path / "times.json"
    fast = pytester.runpytest(*PLUGINS, "-m", "not torch_envs and not ray")
    fast.assert_outcomes(passed=1, deselected=2)
    every = pytester.runpytest(*PLUGINS, f"--suite-times={times}")
    every.assert_outcomes(passed=3)
    every.stdout.fnmatch_lines(["*time per kind of real part and per module*", "*test_kinds.py"])
    kinds = {t["nodeid"].split("::")[1]: t["kind"] for t in json.loads(times.read_text())["tests"]}
    assert kinds == {
        "test_logic": "pure logic",
        "test_worker": "torch workers",
        "test_fleet": "Ray",
    }


def test_make_tests_workers_keep_a_clusters_tests_on_one_worker_and_a_module_together(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 39 item 4: under ``-n 2`` every test of a shared part (here Ray, from two
    modules) runs on one worker, so its session cluster starts once and stops after its
    last user; a module's other tests stay together on one worker."""
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))
    pytester.makepyfile(
        **{
            f"test_{name}": """
            import pytest

            @pytest.fixture(scope="session")
            def ray_cluster():
                yield

            def test_on_ray_1(ray_cluster):
                pass

            def test_on_ray_2(ray_cluster):
                pass

            @pytest.mark.parametrize("case", range(6))
            def test_plain(case):
                pass
            """
            for name in ("one", "two")
        }
    )
    result = pytester.runpytest_subprocess(
        *PLUGINS, "-p", "xdist_scopes", "-n", "2", "-v", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=16)
    worker_of: dict[str, set[str]] = {}
    for line in result.outlines:
        if line.startswith("[gw") and " PASSED " in line:
            worker, nodeid = line.split()[0], line.split(" PASSED ")[1].strip()
            scope = "ray" if "on_ray" in nodeid else nodeid.split("::")[0]
            worker_of.setdefault(scope, set()).add(worker)
    assert sorted(worker_of) == ["ray", "test_one.py", "test_two.py"]
    assert all(len(workers) == 1 for workers in worker_of.values()), worker_of


def test_each_test_is_charged_the_cpu_of_the_children_it_waited_for_not_its_waits(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a machine whose CPUs the suite keeps busy, a test's CPU is what a change must
    cut: a child that burns a CPU second counts against its test, even from an xdist
    worker; a test that sleeps costs next to none however long it waits. The machine's line
    counts that second too, with whatever else kept the CPUs busy."""
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))
    pytester.makepyfile(
        test_cpu="""
        import subprocess, sys, time

        BURN = "import time\\nt = time.process_time()\\nwhile time.process_time() - t < 1.0: pass"

        def test_burns():
            subprocess.run([sys.executable, "-c", BURN], check=True)

        def test_sleeps():
            time.sleep(1.0)
        """
    )
    times = tmp_path / "times.json"
    result = pytester.runpytest_subprocess(
        *PLUGINS, "-n", "2", "-p", "no:cacheprovider", f"--suite-times={times}"
    )
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*CPU s*", "*seconds and CPU seconds per test module*"])
    cpu = {
        t["nodeid"].split("::")[1]: t["cpu_seconds"] for t in json.loads(times.read_text())["tests"]
    }
    assert cpu["test_burns"] >= 1.0, cpu
    assert cpu["test_sleeps"] < 0.5, cpu
    assert json.loads(times.read_text())["module_cpu"]["test_cpu.py"] >= 1.0
    (machine,) = [line for line in result.outlines if line.startswith("the machine's")]
    busy = float(machine.split(": ")[1].split(" CPU s busy")[0])
    assert busy >= 1.0, machine  # the burning child's second, counted machine-wide
