"""The executors give the same results, re-run a job whose worker died exactly once, pass job
errors through, stop cleanly on Ctrl-C, and never import Ray unless asked."""
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import scaleout
from scaleout import ScaleoutError, get_executor

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent


def seeded_draw(seed):
    """A job whose result depends on its seed only."""
    return float(np.random.default_rng(seed).standard_normal(100).sum())


def die_once(args):
    """Kills its own worker process on the first attempt at item ``victim`` (a marker file
    remembers the attempt); every finished job appends its item to ``log``."""
    tmp, i, victim = args
    marker = Path(tmp) / "killed"
    if i == victim and not marker.exists():
        marker.write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.2)
    with open(Path(tmp) / "log", "a") as f:
        f.write(f"{i}\n")
    return i * i


def fail_on_three(i):
    if i == 3:
        raise ValueError("item 3 is bad")
    return i


def test_import_does_not_import_ray():
    code = "import sys, scaleout; scaleout.get_executor('local'); print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("kind", ["serial", "local"])
def test_same_results_serial_local(kind):
    seeds = list(range(7))
    expected = [seeded_draw(s) for s in seeds]
    with get_executor(kind, workers=2) as ex:
        assert ex.map(seeded_draw, seeds) == expected
        got = dict(ex.submit_iter(seeded_draw, seeds))
    assert got == dict(enumerate(expected))


def test_same_results_ray(ray_cluster):
    seeds = list(range(7))
    with get_executor("ray") as ex:
        assert ex.map(seeded_draw, seeds) == [seeded_draw(s) for s in seeds]


@pytest.mark.parametrize("kind", ["local", "ray"])
def test_killed_worker_job_is_retried_once(kind, tmp_path, request):
    if kind == "ray":
        request.getfixturevalue("ray_cluster")
    items = [(str(tmp_path), i, 2) for i in range(5)]
    with get_executor(kind, workers=2, max_retries=2) as ex:
        results = dict(ex.submit_iter(die_once, items))
    assert (tmp_path / "killed").exists()  # the first attempt at item 2 really died
    assert results == {i: i * i for i in range(5)}
    log = (tmp_path / "log").read_text().split()
    assert log.count("2") == 1


@pytest.mark.parametrize("kind", ["local", "ray"])
def test_job_that_always_dies_gives_up(kind, tmp_path, request):
    if kind == "ray":
        request.getfixturevalue("ray_cluster")

    with (get_executor(kind, workers=1, max_retries=1) as ex,
          pytest.raises(scaleout.WorkerDiedError, match="job 0")):
        ex.map(die_always, [str(tmp_path)])


def die_always(tmp):
    os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.parametrize("kind", ["serial", "local", "ray"])
def test_job_error_reaches_caller(kind, request):
    if kind == "ray":
        request.getfixturevalue("ray_cluster")
    with get_executor(kind, workers=2) as ex, pytest.raises(ValueError, match="item 3 is bad"):
        ex.map(fail_on_three, range(5))


def test_object_with_map_is_accepted():
    class Mine:
        def map(self, fn, items):
            return [fn(x) for x in reversed(list(items))][::-1]

    with get_executor(Mine()) as ex:
        assert ex.map(seeded_draw, [1, 2]) == [seeded_draw(1), seeded_draw(2)]
        assert dict(ex.submit_iter(seeded_draw, [1, 2])) == {0: seeded_draw(1), 1: seeded_draw(2)}


def test_bad_settings_are_named():
    with pytest.raises(ScaleoutError, match="unknown executor 'dask'"):
        get_executor("dask")
    with pytest.raises(ScaleoutError, match="workers must be >= 1"):
        get_executor("local", workers=0)
    with pytest.raises(ScaleoutError, match="object with a .map"):
        get_executor(3)


def interrupt(tmp_path, executor: str, ready: list[str], worker_code: str = ""):
    """Runs ``sleep_job`` six times under ``get_executor(executor)`` in a program of its own,
    sends SIGINT to its process group (what a terminal's Ctrl-C sends) once the files ``ready``
    (globs in ``tmp_path``) exist, and returns ``(returncode, stderr)`` once it has ended.
    ``worker_code`` runs in every spawned worker while it imports the program."""
    worker = textwrap.indent(textwrap.dedent(worker_code).strip() or "pass", "    ")
    script = tmp_path / "run.py"
    script.write_text("\n".join([
        "import os, signal, sys, time",
        "from pathlib import Path",
        f"sys.path.insert(0, {str(TESTS)!r})",
        "from scaleout import get_executor",
        "from test_scaleout import sleep_job",
        'if __name__ == "__mp_main__":',
        worker,
        'if __name__ == "__main__":',
        "    signal.signal(signal.SIGINT, signal.default_int_handler)  # as from a terminal",
        "    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})",
        "    try:",
        f"        with get_executor({executor}) as ex:",
        f"            ex.map(sleep_job, [{str(tmp_path)!r}] * 6)",
        "    except KeyboardInterrupt:",
        '        print("interrupted", file=sys.stderr)',
        "        sys.exit(130)", ""]))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    for _ in range(1200):  # until the jobs are where the test wants them (a cluster takes seconds)
        if all(list(tmp_path.glob(g)) for g in ready):
            break
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    for _ in range(100):  # every process of the program's group ends with it
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("processes of the program's group outlived it")
    return proc.returncode, err


@pytest.mark.isolated
def test_ctrl_c_stops_local_pool_cleanly(tmp_path):
    """Ctrl-C while one job runs and the other worker is still starting (importing the script):
    the program stops at once, with no worker traceback and no leaked semaphore."""
    stall = f"""
        blocked = signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])
        mask = Path({str(tmp_path)!r}) / f"mask-{{os.getpid()}}"
        mask.with_suffix(".tmp").write_text(str(blocked))
        os.replace(mask.with_suffix(".tmp"), mask)
        try:  # all workers but the first stall while importing
            os.close(os.open({str(tmp_path / "first")!r}, os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            Path({str(tmp_path / "starting")!r}).touch()
            time.sleep(60)
    """
    code, err = interrupt(tmp_path, '"local", workers=2', ["started-*", "starting"], stall)
    assert code == 130, err
    assert "Traceback" not in err and "leaked" not in err, err
    assert err.strip() == "interrupted"
    # no worker (the stalled one included) could have raised KeyboardInterrupt while importing
    masks = [m.read_text() for m in tmp_path.glob("mask-*")]
    assert masks == ["True", "True"], masks


def test_workers_end_when_their_parent_is_killed(tmp_path):
    """A program killed outright (SIGKILL: no chance to stop its pool) leaves no worker running
    its job for nobody: each notices it was re-parented and ends within a few checks."""
    from conftest import process_running  # here: the script below imports this module

    script = tmp_path / "run.py"
    script.write_text("\n".join([
        "import sys",
        f"sys.path.insert(0, {str(TESTS)!r})",
        "from scaleout import get_executor",
        "from test_scaleout import sleep_job",
        'if __name__ == "__main__":',
        '    with get_executor("local", workers=2) as ex:',
        f"        ex.map(sleep_job, [{str(tmp_path)!r}] * 2)", ""]))
    proc = subprocess.Popen([sys.executable, str(script)], start_new_session=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    for _ in range(1200):
        started = list(tmp_path.glob("started-*"))
        if len(started) == 2:
            break
        time.sleep(0.1)
    workers = [int(p.name.split("-")[1]) for p in started]
    assert len(workers) == 2 and all(map(process_running, workers))
    proc.kill()
    proc.wait(timeout=30)
    for _ in range(300):  # 30 s for checks once a second
        if not any(map(process_running, workers)):
            break
        time.sleep(0.1)
    else:
        left = [w for w in workers if process_running(w)]
        for w in left:  # not left behind by the failure either
            os.kill(w, signal.SIGKILL)
        pytest.fail(f"workers {left} outlived their parent")


def sleep_job(tmp):
    (Path(tmp) / f"started-{os.getpid()}").touch()
    time.sleep(60)


def nap(args):
    """Records its pid, then sleeps ``seconds``."""
    tmp, seconds = args
    (Path(tmp) / f"nap{seconds}-{os.getpid()}").touch()
    time.sleep(seconds)
    return seconds


def test_error_in_caller_stops_running_jobs(tmp_path):
    """An exception in the loop over results ends the jobs still running, at once."""
    with pytest.raises(RuntimeError, match="stop"), get_executor("local", workers=2) as ex:
        for _ in ex.submit_iter(nap, [(str(tmp_path), 0), (str(tmp_path), 600)]):
            while not list(tmp_path.glob("nap600-*")):  # the long job is running
                time.sleep(0.05)
            raise RuntimeError("stop")
    (marker,) = tmp_path.glob("nap600-*")
    with pytest.raises(ProcessLookupError):  # its worker process is gone
        os.kill(int(marker.name.split("-")[1]), 0)


@pytest.mark.isolated
def test_ctrl_c_stops_ray_cleanly(tmp_path):
    """The same on a local Ray cluster started by the executor: exit at once, no traceback, and
    no process of the cluster (raylet, GCS, workers) left running in the program's group."""
    pytest.importorskip("ray")
    code, err = interrupt(tmp_path, '"ray", num_cpus=2', ["started-*"])
    assert code == 130, err
    assert "Traceback" not in err and "leaked" not in err, err
    assert err.strip().endswith("interrupted"), err
