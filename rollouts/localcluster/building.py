"""Building the local control plane's binaries from Go modules, once, into a per-version cache.

Sits under ``rollouts cluster up`` (and ``make test``): nothing here runs if the cache
already holds a verified build. No Docker and no release downloads are needed: every
binary comes from the Go module proxy, compiled by the Go toolchain on the machine.

Layout (``$ROLLOUTS_CACHE`` or ``~/.cache/rollouts``)::

    kubernetes-v1.34.8/bin/{kube-apiserver,kube-controller-manager,kube-scheduler,kubectl}
    etcd-v3.6.10/bin/etcd
    kwok-v0.8.0/bin/{kwok,kwokctl}
    <component>/build.log, <component>/src/ (the throwaway wrapper module)

Why wrapper modules: ``k8s.io/kubernetes`` requires its staging modules at ``v0.0.0`` with
``replace`` lines that only work inside its own repository, and ``go install pkg@v``
refuses modules with replaces; etcd's server module has the same problem. A local main
module that replaces each staging module with its published ``v0.<minor>.<patch>`` tag
resolves both.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

VERSIONS_FILE = Path(__file__).with_name("versions.toml")

KUBE_COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
_STAGING_REQUIREMENT = re.compile(r"^\s*(k8s\.io/[A-Za-z0-9._-]+)\s+v0\.0\.0\s*$", re.MULTILINE)
_GODEBUG = re.compile(r"^godebug\s+.*$", re.MULTILINE)


class BuildError(Exception):
    """A build step failed; the message is one line saying what failed and what to do."""


@dataclass(frozen=True, kw_only=True)
class Versions:
    kubernetes: str
    etcd: str
    kwok: str

    @property
    def staging(self) -> str:
        """The tag of the staging modules (``k8s.io/api`` etc.) matching the Kubernetes pin."""
        _, minor, patch = self.kubernetes.lstrip("v").split(".")
        return f"v0.{minor}.{patch}"

    @property
    def kube_minor(self) -> str:
        return self.kubernetes.lstrip("v").split(".")[1]


@dataclass(frozen=True, kw_only=True)
class Binaries:
    """Absolute paths of every binary a cluster needs."""

    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kubectl: Path
    etcd: Path
    kwok: Path
    kwokctl: Path


def load_versions(path: Path = VERSIONS_FILE) -> Versions:
    data = tomllib.loads(path.read_text())
    return Versions(kubernetes=data["kubernetes"], etcd=data["etcd"], kwok=data["kwok"])


def cache_root() -> Path:
    return Path(os.environ.get("ROLLOUTS_CACHE", Path.home() / ".cache" / "rollouts"))


def component_dirs(versions: Versions, root: Path | None = None) -> dict[str, Path]:
    root = root or cache_root()
    return {
        "kubernetes": root / f"kubernetes-{versions.kubernetes}",
        "etcd": root / f"etcd-{versions.etcd}",
        "kwok": root / f"kwok-{versions.kwok}",
    }


def binaries_for(versions: Versions, root: Path | None = None) -> Binaries:
    dirs = component_dirs(versions, root)
    k, e, w = (dirs[c] / "bin" for c in ("kubernetes", "etcd", "kwok"))
    return Binaries(
        kube_apiserver=k / "kube-apiserver",
        kube_controller_manager=k / "kube-controller-manager",
        kube_scheduler=k / "kube-scheduler",
        kubectl=k / "kubectl",
        etcd=e / "etcd",
        kwok=w / "kwok",
        kwokctl=w / "kwokctl",
    )


def _complete(component_dir: Path) -> bool:
    return (component_dir / "bin" / ".complete").exists()


def ensure_binaries(
    *, versions: Versions | None = None, root: Path | None = None, say: Callable[[str], None] = print
) -> Binaries:
    """Return the cached binaries, building whichever component is missing.

    A component counts as cached only once its build finished and was verified (a
    ``.complete`` marker written last), so an interrupted build is redone, not trusted.
    """
    versions = versions or load_versions()
    dirs = component_dirs(versions, root)
    missing = [c for c, d in dirs.items() if not _complete(d)]
    if missing:
        go = shutil.which("go")
        if go is None:
            raise BuildError(
                "the Go toolchain is not on PATH: install Go >= 1.24 (https://go.dev/dl/) "
                "and run again; it is needed once to build the local control plane"
            )
        builders: dict[str, Callable[[Path, Versions, str], None]] = {
            "etcd": _build_etcd,
            "kwok": _build_kwok,
            "kubernetes": _build_kubernetes,
        }
        for component in ("etcd", "kwok", "kubernetes"):
            if component not in missing:
                continue
            say(
                f"building {component} into {dirs[component]} "
                f"(first run only; log: {dirs[component]}/build.log)"
            )
            builders[component](dirs[component], versions, go)
    else:
        say(f"control plane binaries cached under {cache_root() if root is None else root}")
    return binaries_for(versions, root)


class _Builder:
    """Runs the go commands of one component, logging to its build.log."""

    def __init__(self, component_dir: Path, go: str) -> None:
        self.dir = component_dir
        self.src = component_dir / "src"
        self.bin = component_dir / "bin"
        self.staging_bin = component_dir / "bin.partial"
        self.log = component_dir / "build.log"
        self.go = go
        component_dir.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(self.staging_bin, ignore_errors=True)
        self.staging_bin.mkdir()
        self.src.mkdir(exist_ok=True)
        self.log.write_text("")

    def go_cmd(self, *args: str, what: str) -> str:
        env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
        with self.log.open("a") as log:
            log.write(f"$ go {' '.join(args)}\n")
            log.flush()
            proc = subprocess.run(
                [self.go, *args], cwd=self.src, env=env, stdout=subprocess.PIPE, stderr=log, text=True
            )
            log.write(proc.stdout)
        if proc.returncode != 0:
            last = _last_error_line(self.log)
            raise BuildError(
                f"{what} failed ({last}); see {self.log}. Check that the Go module proxy is reachable "
                f"(go env GOPROXY) and try again, or pin another version in {VERSIONS_FILE}"
            )
        return proc.stdout

    def init_module(self, name: str) -> None:
        if not (self.src / "go.mod").exists():
            self.go_cmd("mod", "init", name, what="creating the wrapper module")

    def publish(self, verify: Callable[[Path], None]) -> None:
        verify(self.staging_bin)
        shutil.rmtree(self.bin, ignore_errors=True)
        self.staging_bin.rename(self.bin)
        (self.bin / ".complete").write_text("")


_ERROR_HINT = re.compile(r"error|not available|forbidden|not found|cannot|failed", re.IGNORECASE)


def _last_error_line(log: Path) -> str:
    """The most telling line of a failed go command: the last one that names an error."""
    lines = [line.strip() for line in log.read_text().splitlines() if line.strip()]
    errors = [line for line in lines if _ERROR_HINT.search(line) and not line.startswith("$ ")]
    picked = errors[-1] if errors else (lines[-1] if lines else "no output")
    return picked[:240]


def _build_etcd(component_dir: Path, versions: Versions, go: str) -> None:
    b = _Builder(component_dir, go)
    b.init_module("local/etcdbin")
    b.go_cmd("get", f"go.etcd.io/etcd/server/v3@{versions.etcd}", what="fetching etcd")
    b.go_cmd(
        "build",
        "-trimpath",
        "-ldflags",
        "-s -w",
        "-o",
        str(b.staging_bin / "etcd"),
        "go.etcd.io/etcd/server/v3",
        what="building etcd",
    )
    b.publish(lambda d: _check_version(d / "etcd", versions.etcd.lstrip("v"), b.log))


def _build_kwok(component_dir: Path, versions: Versions, go: str) -> None:
    b = _Builder(component_dir, go)
    b.init_module("local/kwokbin")
    pkgs = [f"sigs.k8s.io/kwok/cmd/{c}" for c in ("kwok", "kwokctl")]
    b.go_cmd("get", *(f"{p}@{versions.kwok}" for p in pkgs), what="fetching kwok")
    b.go_cmd(
        "build", "-trimpath", "-ldflags", "-s -w", "-o", str(b.staging_bin) + "/", *pkgs, what="building kwok"
    )
    b.publish(lambda d: _check_version(d / "kwokctl", versions.kwok.lstrip("v"), b.log))


def _build_kubernetes(component_dir: Path, versions: Versions, go: str) -> None:
    b = _Builder(component_dir, go)
    b.init_module("local/k8sbin")
    meta = json.loads(
        b.go_cmd(
            "mod", "download", "-json", f"k8s.io/kubernetes@{versions.kubernetes}", what="fetching kubernetes"
        )
    )
    published = Path(meta["GoMod"]).read_text()
    edits = [
        f"-replace={m}={m}@{versions.staging}" for m in sorted(set(_STAGING_REQUIREMENT.findall(published)))
    ]
    if not edits:
        raise BuildError(f"no staging modules found in k8s.io/kubernetes@{versions.kubernetes}'s go.mod")
    b.go_cmd("mod", "edit", *edits, what="adding staging replaces")
    # Keep upstream's GODEBUG defaults under a newer Go toolchain.
    godebug = _GODEBUG.search(published)
    gomod = b.src / "go.mod"
    if godebug and "godebug" not in gomod.read_text():
        gomod.write_text(gomod.read_text().replace("\ngo ", f"\n{godebug.group(0)}\n\ngo ", 1))
    pkgs = [f"k8s.io/kubernetes/cmd/{c}" for c in KUBE_COMMANDS]
    b.go_cmd("get", *(f"{p}@{versions.kubernetes}" for p in pkgs), what="resolving kubernetes commands")
    ldflags = ["-s", "-w"]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        ldflags += [
            f"-X {pkg}.gitVersion={versions.kubernetes}",
            f"-X {pkg}.gitMajor=1",
            f"-X {pkg}.gitMinor={versions.kube_minor}",
            f"-X {pkg}.gitTreeState=clean",
            f"-X {pkg}.buildDate=1970-01-01T00:00:00Z",
        ]
    b.go_cmd(
        "build",
        "-trimpath",
        "-ldflags",
        " ".join(ldflags),
        "-o",
        str(b.staging_bin) + "/",
        *pkgs,
        what="building kube-apiserver, kube-controller-manager, kube-scheduler and kubectl",
    )
    b.publish(lambda d: _check_version(d / "kube-apiserver", versions.kubernetes, b.log))


def _check_version(binary: Path, expected: str, log: Path) -> None:
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True)
    text = out.stdout + out.stderr
    if expected not in text:
        raise BuildError(
            f"{binary.name} --version printed {text.strip()[:120]!r}, expected {expected}; see {log}"
        )
