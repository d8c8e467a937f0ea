"""The shipped worker recipes: the Kubernetes base job template is one Prefect accepts (every placeholder
declared as a variable, a GPU per flow-run pod), and the SLURM script parses and starts the right worker."""

from __future__ import annotations

import json
import subprocess

from prefect.utilities.templating import find_placeholders

from core.config import REPO_ROOT

TEMPLATE = REPO_ROOT / "ops" / "k8s" / "base-job-template.json"
SBATCH = REPO_ROOT / "ops" / "slurm" / "evalflow-worker.sbatch"


def test_the_kubernetes_template_declares_every_placeholder_and_requests_a_gpu() -> None:
    template = json.loads(TEMPLATE.read_text())
    variables = template["variables"]["properties"]
    used = {p.name for p in find_placeholders(json.dumps(template["job_configuration"]))}
    assert {"image", "command", "env", "gpu"} <= used
    assert used <= set(variables), f"undeclared: {used - set(variables)}"
    container = template["job_configuration"]["job_manifest"]["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "{{ gpu }}"
    assert (container["image"], container["args"]) == ("{{ image }}", "{{ command }}")
    assert variables["gpu"]["default"] == 1


def test_the_slurm_script_parses_and_runs_one_worker_per_node_with_its_gpus_as_slots() -> None:
    assert subprocess.run(["bash", "-n", str(SBATCH)], capture_output=True, text=True).returncode == 0
    text = SBATCH.read_text()
    assert "#SBATCH --ntasks-per-node=1" in text and "srun" in text
    assert 'EVALFLOW_SLOTS="gpu:${CUDA_VISIBLE_DEVICES}"' in text and "evalflow local slots" in text
    assert 'prefect worker start --pool "$POOL" --type process' in text
    missing = subprocess.run(["bash", str(SBATCH)], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert missing.returncode != 0 and "set PREFECT_API_URL" in missing.stderr  # one line, before anything starts
