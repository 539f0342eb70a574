"""Workers of a Ray cluster started by the executor import the same code as the driver."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# A script that puts the checkout on sys.path itself (as the benchmarks and analyses do), run
# with no PYTHONPATH: its workers must find this checkout's packages, not another installed copy.
SCRIPT = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
import scaleout


def where(_):
    import scaleout
    return scaleout.__file__


if __name__ == "__main__":
    with scaleout.get_executor("ray", num_cpus=1) as ex:
        print(ex.map(where, [0])[0])
    print(scaleout.__file__)
"""


def test_local_ray_workers_import_the_drivers_checkout(tmp_path):
    pytest.importorskip("ray")
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, text=True,
                         capture_output=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    worker, driver = out.stdout.split()[-2:]
    assert worker == driver == str(ROOT / "scaleout" / "__init__.py")
