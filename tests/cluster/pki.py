"""The test control planes' PKI, made with Debian's openssl: one CA, the API server's serving
certificate, the service-account key pair and a static token file.

Used by the single-node cluster (``tests/cluster/harness.py``) and the QEMU guest kubelet's
host control plane (``tests/vm/controlplane.py``). Everything is valid for two days.
"""

from __future__ import annotations

import subprocess
from pathlib import Path


def make_pki(pki: Path, *, ca_cn: str, sans: list[str], token: str) -> None:
    """Write into ``pki`` (created when missing): ``ca.crt``/``ca.key``, ``apiserver.crt``/
    ``apiserver.key`` for the subject alternative names ``sans`` (openssl's form, e.g.
    ``"IP:127.0.0.1"``, ``"DNS:kubernetes"``), ``sa.key``/``sa.pub`` and ``tokens.csv`` giving
    ``token`` to the user ``admin`` in ``system:masters``.

    The certificates carry the extensions Python 3.13's default ``VERIFY_X509_STRICT`` wants
    (a critical CA basicConstraints, key usages, key identifiers): a guest's Python verifies with
    it. Raises ``subprocess.CalledProcessError`` when openssl fails.
    """
    pki.mkdir(parents=True, exist_ok=True)

    def ossl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=pki)

    ossl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
         "ca.crt", "-days", "2", "-subj", f"/CN={ca_cn}",
         "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign",
         "-addext", "subjectKeyIdentifier=hash")
    (pki / "san.cnf").write_text(
        "[req]\ndistinguished_name=dn\n[dn]\n[ext]\n"
        f"subjectAltName={','.join(sans)}\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n"
        "extendedKeyUsage=serverAuth\n")
    ossl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "apiserver.key", "-out",
         "apiserver.csr", "-subj", "/CN=kube-apiserver")
    ossl("x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
         "-CAcreateserial", "-out", "apiserver.crt", "-days", "2", "-extfile", "san.cnf",
         "-extensions", "ext")
    ossl("genrsa", "-out", "sa.key", "2048")
    ossl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub")
    (pki / "tokens.csv").write_text(f'{token},admin,admin,"system:masters"\n')
