"""A throwaway OpenSSH server on 127.0.0.1 for the SSH tests and benchmark.

`LocalSshd.start(tmp, n_aliases)` generates a host key and a user key in `tmp`, writes its own
sshd_config (no PAM, AuthorizedKeysFile in tmp, StrictModes no, AcceptEnv TRNWATCH_SIM_HOST) and
an ssh_config with host aliases trn-00, trn-01, ... that all reach it, each with
`SetEnv TRNWATCH_SIM_HOST=<index>`: the remote command `SIM_REMOTE_COMMAND` then plays that
simulated host, so each alias is a different host of one simulated UltraServer.
"""

import getpass
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

SSHD = Path("/usr/sbin/sshd")
SSH_KEYGEN = shutil.which("ssh-keygen")
SSH_CLIENT = shutil.which("ssh")
MISSING = (
    None
    if SSHD.exists() and SSH_KEYGEN and SSH_CLIENT
    else (
        "needs OpenSSH server and client (/usr/sbin/sshd, ssh, ssh-keygen): apt-get install openssh-server openssh-client"
    )
)

# Runs on the "remote" side: the simulator as a drop-in neuron-monitor, reading the config
# trnwatch sends on stdin, playing the host the alias's SetEnv names.
SIM_REMOTE_COMMAND = f'exec {sys.executable} -m trnwatch.workloads.sim --host "$TRNWATCH_SIM_HOST" -c /dev/stdin'


def alias(index: int) -> str:
    return f"trn-{index:02d}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LocalSshd:
    dir: Path
    port: int
    proc: subprocess.Popen
    ssh_config: Path

    @classmethod
    def start(cls, tmp: Path, n_aliases: int) -> "LocalSshd":
        tmp.mkdir(parents=True, exist_ok=True)
        for key in ("host_key", "user_key"):
            subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", key, "-f", str(tmp / key)], check=True)
        shutil.copy(tmp / "user_key.pub", tmp / "authorized_keys")
        port = free_port()
        (tmp / "sshd_config").write_text(
            f"Port {port}\nListenAddress 127.0.0.1\nHostKey {tmp / 'host_key'}\nPidFile {tmp / 'sshd.pid'}\n"
            f"AuthorizedKeysFile {tmp / 'authorized_keys'}\nStrictModes no\nUsePAM no\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n"
            "PermitRootLogin prohibit-password\nAcceptEnv TRNWATCH_SIM_HOST\n"
            # 36 hosts connect at once: the default (10:30:100) would drop some of them.
            "MaxStartups 200\nLogLevel ERROR\n"
        )
        host_key = (tmp / "host_key.pub").read_text().split()
        (tmp / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_key[0]} {host_key[1]}\n")
        blocks = [f"Host {alias(i)}\n  SetEnv TRNWATCH_SIM_HOST={i}\n" for i in range(n_aliases)]
        blocks.append(
            f"Host trn-*\n  HostName 127.0.0.1\n  Port {port}\n  User {getpass.getuser()}\n"
            f"  IdentityFile {tmp / 'user_key'}\n  IdentitiesOnly yes\n  UserKnownHostsFile {tmp / 'known_hosts'}\n"
            "  GlobalKnownHostsFile /dev/null\n  StrictHostKeyChecking yes\n"
        )
        config = tmp / "ssh_config"
        config.write_text("".join(blocks))
        if os.geteuid() == 0:
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation directory
        proc = subprocess.Popen(
            [str(SSHD), "-D", "-e", "-f", str(tmp / "sshd_config")],
            stdout=subprocess.DEVNULL,
            stderr=open(tmp / "sshd.log", "wb"),
        )
        server = cls(tmp, port, proc, config)
        deadline = time.monotonic() + 120  # bounds a broken sshd only: a loaded machine starts it slowly
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"sshd exited: {(tmp / 'sshd.log').read_text()}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return server
            except OSError:
                time.sleep(0.05)
        server.stop()
        raise RuntimeError("sshd did not start listening within 120 s")

    def remote_sims(self, host_index: int) -> list[psutil.Process]:
        """The simulator processes this sshd runs for simulated host `host_index`."""
        found = []
        for child in psutil.Process(self.proc.pid).children(recursive=True):
            try:
                cmd = child.cmdline()
            except psutil.NoSuchProcess:
                continue
            if "trnwatch.workloads.sim" in cmd and cmd[cmd.index("--host") + 1] == str(host_index):
                found.append(child)
        return found

    def kill_remote(self, host_index: int) -> int:
        """Kill the remote side of one host (its simulator, by pid); return how many were killed."""
        sims = self.remote_sims(host_index)
        for sim in sims:
            sim.kill()
        return len(sims)

    def stop(self) -> None:
        for child in psutil.Process(self.proc.pid).children(recursive=True):
            try:
                child.kill()
            except psutil.NoSuchProcess:
                pass
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
