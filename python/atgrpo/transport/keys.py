"""CURVE keys for tcp endpoints: encryption plus mutual authentication of hub and actors.

Layout of a key folder made by `generate_keys(folder)` (`atgrpo-keys init`; ZPL certificate files,
as pyzmq writes them):

    folder/hub.key              hub public key          (actors need it to connect)
    folder/hub.key_secret       hub public + secret key (the hub only)
    folder/actors/actor.key     actor public key        (the hub accepts every *.key in actors/)
    folder/actors/actor.key_secret  actor public + secret key (every actor of the run)
    folder/actors/NAME.key[_secret]  one more actor key (`add_actor`, `atgrpo-keys add-actor`)

`actor_bundle(folder, name, dest)` writes what one actor host needs and nothing more: `hub.key` and
`actors/NAME.key_secret` (no hub secret, no other actor's secret).

Invariants:
- The folder and `actors/` are mode 0700 and the secret files 0600, owned by the caller; copying
  the folder to another host is how a multi-host run shares the keys.
- A hub given `curve_keys` accepts a connection only if the peer proves it holds the secret of a
  public key in `actors/` (ZAP handler, a `zmq.auth.thread.ThreadAuthenticator` on the hub's own
  context), and actors only talk to a hub holding `hub.key_secret`. A peer that fails the
  handshake is never seen by the hub's `recv`; on its side it just times out.
- ipc endpoints need no keys: the socket lives in a private 0700 directory.
"""

from __future__ import annotations

import os
from pathlib import Path

import zmq.auth

from atgrpo.transport.errors import CurveKeyError

HUB = "hub"
ACTOR = "actor"
ACTORS_DIR = "actors"


def generate_keys(folder: str | os.PathLike[str]) -> Path:
    """Create a fresh hub keypair and actor keypair in `folder` (made private); returns the folder.

    Overwrites the keys of an earlier call on the same folder.
    """
    root = Path(folder)
    actors = root / ACTORS_DIR
    for directory in (root, actors):
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        directory.chmod(0o700)
    for directory, name in ((root, HUB), (actors, ACTOR)):
        _, secret = zmq.auth.create_certificates(directory, name)
        os.chmod(secret, 0o600)  # pyzmq writes with the umask; the folder kept it private meanwhile
    return root


def add_actor(folder: str | os.PathLike[str], name: str) -> Path:
    """A new actor keypair `actors/<name>.key[_secret]` in an existing key folder (the hub, which reads
    `actors/` when it starts, then accepts it); returns its secret file. Refuses to overwrite."""
    if not name or not all(c.isalnum() or c in "-_." for c in name) or name.startswith("."):
        raise CurveKeyError(f"actor key name {name!r}: use letters, digits, '-', '_' and '.'")
    actors = allowed_actors_dir(folder)
    if not (Path(folder) / f"{HUB}.key").is_file() or not actors.is_dir():
        raise CurveKeyError(f"{folder} is not a key folder (run `atgrpo-keys init {folder}` first)")
    if (actors / f"{name}.key").exists():
        raise CurveKeyError(f"actor key {name!r} already exists in {actors}")
    _, secret = zmq.auth.create_certificates(actors, name)
    os.chmod(secret, 0o600)
    return Path(secret)


def actor_bundle(folder: str | os.PathLike[str], name: str, dest: str | os.PathLike[str]) -> Path:
    """The key folder one actor host needs: the hub's public key and this actor's keypair only."""
    src = Path(folder)
    actor_keys(src, name)  # both files exist and load
    out = Path(dest)
    (out / ACTORS_DIR).mkdir(mode=0o700, parents=True, exist_ok=True)
    out.chmod(0o700)
    (out / ACTORS_DIR).chmod(0o700)
    for rel, mode in (
        (f"{HUB}.key", 0o644),
        (f"{ACTORS_DIR}/{name}.key", 0o644),
        (f"{ACTORS_DIR}/{name}.key_secret", 0o600),
    ):
        target = out / rel
        target.write_bytes((src / rel).read_bytes())
        target.chmod(mode)
    return out


def hub_keys(folder: str | os.PathLike[str]) -> tuple[bytes, bytes]:
    """(public, secret) of the hub."""
    return _load(Path(folder) / f"{HUB}.key_secret")


def actor_keys(folder: str | os.PathLike[str], name: str = ACTOR) -> tuple[bytes, bytes, bytes]:
    """(actor public, actor secret, hub public) for the actor key `name`."""
    root = Path(folder)
    public, secret = _load(root / ACTORS_DIR / f"{name}.key_secret")
    hub_public, _ = _load(root / f"{HUB}.key", secret=False)
    return public, secret, hub_public


def allowed_actors_dir(folder: str | os.PathLike[str]) -> Path:
    return Path(folder) / ACTORS_DIR


def _load(path: Path, *, secret: bool = True) -> tuple[bytes, bytes]:
    try:
        public, secret_key = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as exc:
        raise CurveKeyError(f"cannot load CURVE key {path}: {exc}") from None
    if secret and not secret_key:
        raise CurveKeyError(f"CURVE key file {path} has no secret key")
    return public, secret_key or b""


__all__ = ["actor_bundle", "actor_keys", "add_actor", "allowed_actors_dir", "generate_keys", "hub_keys"]
