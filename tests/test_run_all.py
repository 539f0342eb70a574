"""``analyses/run_all.py``: every script runs, failures are reported, N scripts run at once."""
import importlib.util
import json
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _load(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("run_all_under_test", ROOT / "analyses" / "run_all.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "HERE", tmp_path)
    monkeypatch.setattr(mod, "TIMES", tmp_path / "out" / "run_times.json")
    return mod


def _script(path, body):
    path.write_text(textwrap.dedent(body) + '\nif __name__ == "__main__":\n    main()\n')


def test_two_at_a_time_failures_and_recorded_times(tmp_path, monkeypatch):
    mod = _load(tmp_path, monkeypatch)
    # a and b each wait for the other's marker: they finish only if they run concurrently
    for me, other in (("a", "b"), ("b", "a")):
        _script(tmp_path / f"{me}.py", f"""
            import os, pathlib, sys, time
            def main():
                pathlib.Path("{tmp_path}/{me}.started").touch()
                t = time.time()
                while not pathlib.Path("{tmp_path}/{other}.started").exists():
                    if time.time() - t > 60:
                        sys.exit(3)
                    time.sleep(0.05)
                pathlib.Path("{tmp_path}/{me}.threads").write_text(os.environ.get("OMP_NUM_THREADS", ""))
            """)
    _script(tmp_path / "c_fails.py", "import sys\ndef main():\n    sys.exit(4)\n")
    (tmp_path / "helper.py").write_text("X = 1\n")  # no __main__ block: not a script
    assert [p.stem for p in mod.scripts()] == ["a", "b", "c_fails"]
    assert mod.analyses_main(["--jobs", "2"]) == 1          # c_fails failed
    assert (tmp_path / "a.threads").read_text() == "1"      # one thread per child when jobs > 1
    times = json.loads((tmp_path / "out" / "run_times.json").read_text())
    assert set(times["full"]) == {"a", "b", "c_fails"}
    assert "total_minutes" not in times                     # a failed run records no total
    assert mod.analyses_main(["--only", "nope"]) == 2


def test_one_at_a_time_keeps_the_environment(tmp_path, monkeypatch):
    mod = _load(tmp_path, monkeypatch)
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    _script(tmp_path / "a.py", f"""
        import os, pathlib
        def main():
            pathlib.Path("{tmp_path}/a.threads").write_text(os.environ.get("OMP_NUM_THREADS", ""))
        """)
    assert mod.analyses_main(["--jobs", "1"]) == 0
    assert (tmp_path / "a.threads").read_text() == "7"
    times = json.loads((tmp_path / "out" / "run_times.json").read_text())
    assert times["total_minutes"]["full"]["jobs"] == 1


def test_separate_studies_run_only_when_named(tmp_path, monkeypatch):
    mod = _load(tmp_path, monkeypatch)
    monkeypatch.setattr(mod, "SEPARATE", {"long": "run it alone"})
    for name in ("a", "long"):
        _script(tmp_path / f"{name}.py", f"""
            import pathlib
            def main():
                pathlib.Path("{tmp_path}/{name}.ran").touch()
            """)
    assert mod.analyses_main(["--jobs", "1"]) == 0
    assert (tmp_path / "a.ran").exists() and not (tmp_path / "long.ran").exists()
    assert mod.analyses_main(["--jobs", "1", "--only", "long"]) == 0
    assert (tmp_path / "long.ran").exists()
