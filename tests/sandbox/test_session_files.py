"""Session ``file`` resources, outputs and skills, through the official SDK against a real
``stead serve`` and sandbox host (bubblewrap): an uploaded file is readable and
not writable at its mount, resources added and deleted take effect at the next
call, what the agent writes to ``/mnt/session/outputs`` is in ``files.list`` for
the session with the same bytes (each content once), and the mounts come back
after the sandbox is destroyed and made again."""

from __future__ import annotations

import hashlib
import io
import os
import uuid
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from stead.testing import FakeModel, HostProcess, ServeForker, ServerProcess
from tests.conftest import make_client, sdk_of
from tests.integration.skill_files import skill_files, zipped
from tests.sandbox.conftest import bash_turn, requires_isolation, shell, sweepless_server

pytestmark = requires_isolation

UPLOADS = "/mnt/session/uploads"
OUTPUTS = "/mnt/session/outputs"


@pytest.fixture(scope="module")
def server(
    host: HostProcess, tmp_path_factory: pytest.TempPathFactory, forker: ServeForker
) -> Iterator[ServerProcess]:
    data = tmp_path_factory.mktemp("files") / "data"
    with (
        FakeModel(shell) as fake,
        sweepless_server(host, fake, data, forker) as started,
    ):
        yield started


@pytest.fixture
def client(server: ServerProcess) -> Iterator[anthropic.Anthropic]:
    with sdk_of(server) as opened:
        yield opened


def upload(client: anthropic.Anthropic, name: str, data: bytes) -> str:
    return client.beta.files.upload(file=(name, io.BytesIO(data), "text/plain")).id


def new_session(client: anthropic.Anthropic, **create: Any) -> str:
    agent = client.beta.agents.create(
        name="files", model="claude-sonnet-4-6", tools=[{"type": "agent_toolset_20260401"}]
    )
    environment = client.beta.environments.create(name=f"files-{agent.id[-8:]}")
    return client.beta.sessions.create(agent=agent.id, environment_id=environment.id, **create).id


def outputs_of(client: anthropic.Anthropic, session_id: str) -> list[Any]:
    return list(client.beta.files.list(scope_id=session_id))


def test_an_attached_file_is_readable_and_not_writable(client: anthropic.Anthropic) -> None:
    file_id = upload(client, "notes.txt", b"line one\n")
    session_id = new_session(client, resources=[{"type": "file", "file_id": file_id}])
    [resource] = client.beta.sessions.retrieve(session_id).resources
    assert (resource.type, resource.mount_path) == ("file", f"{UPLOADS}/{file_id}")
    path = f"{UPLOADS}/{file_id}"
    output = bash_turn(
        client, session_id, f"cat {path}; echo x >> {path}; echo rc=$?; rm -f {path}; cat {path}"
    )
    assert output.startswith("line one\n")
    assert "rc=1" in output
    assert output.count("line one") == 2


def test_resources_added_and_deleted_take_effect(client: anthropic.Anthropic) -> None:
    session_id = new_session(client)
    file_id = upload(client, "report.csv", b"a,b\n1,2\n")
    added = client.beta.sessions.resources.add(
        session_id, type="file", file_id=file_id, mount_path=f"{UPLOADS}/data/report.csv"
    )
    assert added.id.startswith("sesrsc_") and added.file_id == file_id
    assert client.beta.sessions.resources.retrieve(added.id, session_id=session_id) == added
    assert [r.id for r in client.beta.sessions.resources.list(session_id)] == [added.id]
    assert bash_turn(client, session_id, f"cat {UPLOADS}/data/report.csv") == "a,b\n1,2"
    deleted = client.beta.sessions.resources.delete(added.id, session_id=session_id)
    assert (deleted.id, deleted.type) == (added.id, "session_resource_deleted")
    assert client.beta.sessions.resources.list(session_id).data == []
    assert "No such file" in bash_turn(client, session_id, f"ls {UPLOADS}/data/report.csv 2>&1")


def test_a_resource_may_take_the_place_of_a_deleted_ones_directory_or_file(
    client: anthropic.Anthropic,
) -> None:
    """Before, the new file was put before the old one was removed, which the
    host refused (a directory in the way, or a file where a directory must
    be): every sandbox tool call of the session failed from then on."""
    first, second = upload(client, "first.txt", b"first"), upload(client, "second.txt", b"second")
    session_id = new_session(client)
    resources = client.beta.sessions.resources
    for old, new in ((f"{UPLOADS}/a/b", f"{UPLOADS}/a"), (f"{UPLOADS}/x", f"{UPLOADS}/x/y")):
        added = resources.add(session_id, type="file", file_id=first, mount_path=old)
        assert bash_turn(client, session_id, f"cat {old}") == "first"
        resources.delete(added.id, session_id=session_id)
        resources.add(session_id, type="file", file_id=second, mount_path=new)
        assert bash_turn(client, session_id, f"cat {new}") == "second"


def test_a_deleted_resource_leaves_no_directory_behind(client: anthropic.Anthropic) -> None:
    """Only a resource's file was removed: the directories made for it stayed,
    empty, in /mnt/session/uploads, where the agent saw a folder of a file it
    no longer had. A directory another resource still needs stays."""
    first, second = upload(client, "first.txt", b"first"), upload(client, "second.txt", b"second")
    session_id = new_session(client)
    resources = client.beta.sessions.resources
    deep = resources.add(
        session_id, type="file", file_id=first, mount_path=f"{UPLOADS}/data/2026/q1.csv"
    )
    shared = resources.add(
        session_id, type="file", file_id=second, mount_path=f"{UPLOADS}/shared/a.txt"
    )
    beside = resources.add(
        session_id, type="file", file_id=first, mount_path=f"{UPLOADS}/shared/sub/b.txt"
    )
    listed = f"cd {UPLOADS} && find . -mindepth 1 | sort"
    assert bash_turn(client, session_id, listed).split() == [
        "./data",
        "./data/2026",
        "./data/2026/q1.csv",
        "./shared",
        "./shared/a.txt",
        "./shared/sub",
        "./shared/sub/b.txt",
    ]
    resources.delete(deep.id, session_id=session_id)
    resources.delete(beside.id, session_id=session_id)
    assert bash_turn(client, session_id, listed).split() == ["./shared", "./shared/a.txt"]
    resources.delete(shared.id, session_id=session_id)
    assert bash_turn(client, session_id, f"{listed}; echo listed") == "listed"


def test_a_deleted_file_leaves_its_mount(client: anthropic.Anthropic) -> None:
    file_id = upload(client, "brief.txt", b"brief")
    session_id = new_session(client, resources=[{"type": "file", "file_id": file_id}])
    assert bash_turn(client, session_id, f"cat {UPLOADS}/{file_id}") == "brief"
    client.beta.files.delete(file_id)
    assert "No such file" in bash_turn(client, session_id, f"cat {UPLOADS}/{file_id} 2>&1")


def test_a_file_whose_bytes_are_gone_is_left_out_and_the_others_mounted(
    server: ServerProcess, client: anthropic.Anthropic
) -> None:
    """A file's blob removed behind stead's back is as gone as a deleted file:
    before, every turn's mounting failed as if the blob store were down, and
    the session stayed ``running`` for good once its retries ran out."""
    kept, lost = upload(client, "kept.txt", b"kept"), upload(client, "lost.txt", b"lost")
    [blob] = [p for p in server.data_dir.rglob(lost) if p.is_file()]
    blob.unlink()
    resources = [{"type": "file", "file_id": kept}, {"type": "file", "file_id": lost}]
    session_id = new_session(client, resources=resources)
    output = bash_turn(client, session_id, f"cat {UPLOADS}/{kept}; ls {UPLOADS}/{lost} 2>&1")
    assert output.startswith("kept") and "No such file" in output


def test_outputs_are_filed_once_per_content(client: anthropic.Anthropic) -> None:
    session_id = new_session(client)
    bash_turn(
        client, session_id, f"printf 'first' > {OUTPUTS}/result.txt && mkdir -p {OUTPUTS}/deep"
    )
    [filed] = outputs_of(client, session_id)
    assert (filed.filename, filed.size_bytes, filed.scope.id) == ("result.txt", 5, session_id)
    assert client.beta.files.download(filed.id).read() == b"first"
    bash_turn(client, session_id, "true")  # nothing new: nothing filed
    assert [f.id for f in outputs_of(client, session_id)] == [filed.id]
    bash_turn(client, session_id, f"printf 'second' > {OUTPUTS}/result.txt")
    newest, first = outputs_of(client, session_id)
    assert first.id == filed.id
    assert client.beta.files.download(newest.id).read() == b"second"


def test_outputs_past_the_quota_are_a_session_error_and_filed_once_there_is_room(
    server: ServerProcess,
) -> None:
    key = server.create_key(new_workspace=f"quota-{uuid.uuid4().hex[:6]}")
    admin = server.create_key(admin=True)
    with make_client(server.url, key) as client:
        own = client.get("/v1/stead/limits", cast_to=object)
        limits = f"/v1/stead/workspaces/{own['workspace_id']}/limits"  # type: ignore[index]
        with make_client(server.url, admin) as operator:
            operator.post(limits, body={"file_storage_bytes": 100}, cast_to=object)
            session_id = new_session(client)
            bash_turn(
                client,
                session_id,
                f"head -c 10 /dev/zero > {OUTPUTS}/small && head -c 500 /dev/zero > {OUTPUTS}/big",
            )
            assert [f.filename for f in outputs_of(client, session_id)] == ["small"]
            [error] = [
                e for e in client.beta.sessions.events.list(session_id) if e.type == "session.error"
            ]
            message = error.error.message  # type: ignore[union-attr]
            assert "big" in message and "quota of 100 bytes" in message, message
            operator.post(limits, body={"file_storage_bytes": None}, cast_to=object)
        bash_turn(client, session_id, "true")
        assert {f.filename for f in outputs_of(client, session_id)} == {"small", "big"}


def test_an_output_whose_name_is_not_utf_8_is_skipped_and_the_others_filed(
    client: anthropic.Anthropic,
) -> None:
    """Before, such a name (its bytes as surrogates) failed the capture, and with
    it the run, which was retried until its attempts ran out: the session stayed
    busy all that while and none of its outputs was filed."""
    session_id = new_session(client)
    bash_turn(client, session_id, f"printf odd > $'{OUTPUTS}/odd\\xff.txt' && touch {OUTPUTS}/ok")
    assert [f.filename for f in outputs_of(client, session_id)] == ["ok"]


def test_a_40_mib_file_is_mounted_and_captured_whole(client: anthropic.Anthropic) -> None:
    data = os.urandom(40 * 1024 * 1024)
    file_id = upload(client, "big.bin", data)
    session_id = new_session(client, resources=[{"type": "file", "file_id": file_id}])
    digest = bash_turn(
        client,
        session_id,
        f"sha256sum {UPLOADS}/{file_id} | cut -c1-64 && cp {UPLOADS}/{file_id} {OUTPUTS}/copy.bin",
    )
    assert digest.strip() == hashlib.sha256(data).hexdigest()
    [filed] = outputs_of(client, session_id)
    assert (filed.filename, filed.size_bytes) == ("copy.bin", len(data))
    assert client.beta.files.download(filed.id).read() == data


def test_mounts_come_back_after_the_sandbox_is_destroyed(client: anthropic.Anthropic) -> None:
    file_id = upload(client, "keep.txt", b"kept\n")
    session_id = new_session(client, resources=[{"type": "file", "file_id": file_id}])
    assert bash_turn(client, session_id, f"cat {UPLOADS}/{file_id}") == "kept"
    client.delete(f"/v1/sessions/{session_id}/sandbox", cast_to=object)
    assert bash_turn(client, session_id, f"cat {UPLOADS}/{file_id}; touch {OUTPUTS}/ok") == "kept"
    assert [f.filename for f in outputs_of(client, session_id)] == ["ok"]


def test_bad_file_resources_are_refused_and_nothing_is_stored(
    client: anthropic.Anthropic, server: ServerProcess
) -> None:
    session_id = new_session(client)
    file_id = upload(client, "gone.txt", b"x")
    client.beta.files.delete(file_id)
    for bad, field in (
        ({"file_id": "file_unknown"}, "file_id"),
        ({"file_id": file_id}, "file_id"),
    ):
        with pytest.raises(anthropic.NotFoundError, match=field):
            client.beta.sessions.resources.add(session_id, type="file", **bad)
    live = upload(client, "live.txt", b"y")
    # The last three the sandbox host cannot hold: accepted, they failed every
    # sandbox tool call of the session until the resource was deleted.
    for mount_path in (
        "/etc/passwd",
        f"{UPLOADS}/../../etc/x",
        f"{OUTPUTS}/x",
        UPLOADS,
        f"{UPLOADS}/{'n' * 256}",
        f"{UPLOADS}/{'d/' * 32}f",
        f"{UPLOADS}/.stead-put-0123456789abcdef",
    ):
        with pytest.raises(anthropic.BadRequestError, match="mount_path"):
            client.beta.sessions.resources.add(
                session_id, type="file", file_id=live, mount_path=mount_path
            )
    client.beta.sessions.resources.add(session_id, type="file", file_id=live)
    with pytest.raises(anthropic.BadRequestError, match="mount_path"):
        client.beta.sessions.resources.add(session_id, type="file", file_id=live)
    assert len(client.beta.sessions.resources.list(session_id).data) == 1
    with pytest.raises(anthropic.NotFoundError, match=r"resources\.1\.file_id"):
        new_session(
            client,
            resources=[{"type": "file", "file_id": live}, {"type": "file", "file_id": file_id}],
        )
    # Another workspace's file is as unknown as a made-up one.
    other = make_client(server.url, server.create_key(new_workspace="other"))
    with other, pytest.raises(anthropic.NotFoundError, match="file_id"):
        new_session(other, resources=[{"type": "file", "file_id": live}])


def test_an_agents_skills_are_where_the_prompt_says_and_read_only(
    client: anthropic.Anthropic,
) -> None:
    name = f"pdf-{uuid.uuid4().hex[:8]}"
    skill = client.beta.skills.create(files=skill_files(name, script=b"print('v1')\n"))
    agent = client.beta.agents.create(
        name="skilled",
        model="claude-sonnet-4-6",
        tools=[{"type": "agent_toolset_20260401"}],
        skills=[{"type": "custom", "skill_id": skill.id}],
    )
    environment = client.beta.environments.create(name=f"skills-{agent.id[-8:]}")
    session_id = client.beta.sessions.create(agent=agent.id, environment_id=environment.id).id
    here = f"/workspace/skills/{name}"
    assert bash_turn(client, session_id, f"cat {here}/scripts/fill.py") == "print('v1')"
    assert f"name: {name}" in bash_turn(client, session_id, f"cat {here}/SKILL.md")
    refused = bash_turn(
        client, session_id, f"echo x > {here}/SKILL.md; rm -f {here}/SKILL.md; ls {here}"
    )
    assert "Read-only file system" in refused and refused.splitlines()[-2:] == [
        "SKILL.md",
        "scripts",
    ]
    # A new version (the agent follows "latest") shows at the next turn.
    client.beta.skills.versions.create(skill.id, files=skill_files(name, script=b"print('v2')\n"))
    assert bash_turn(client, session_id, f"cat {here}/scripts/fill.py") == "print('v2')"
    # A session whose agent has no skills has no /workspace/skills.
    plain = new_session(client)
    assert "no skills" in bash_turn(
        client, plain, "ls /workspace/skills 2>/dev/null || echo no skills"
    )


def test_a_skill_the_agent_no_longer_has_leaves_no_directory(
    client: anthropic.Anthropic,
) -> None:
    """Only a skill's files were removed: its directory (and a directory a new
    version dropped) stayed, empty, where the agent looks for its skills."""
    kept, gone = f"kept-{uuid.uuid4().hex[:8]}", f"gone-{uuid.uuid4().hex[:8]}"
    kept_skill = client.beta.skills.create(files=skill_files(kept))
    gone_skill = client.beta.skills.create(files=skill_files(gone))
    agent = client.beta.agents.create(
        name="skilled",
        model="claude-sonnet-4-6",
        tools=[{"type": "agent_toolset_20260401"}],
        skills=[
            {"type": "custom", "skill_id": kept_skill.id},
            {"type": "custom", "skill_id": gone_skill.id},
        ],
    )
    environment = client.beta.environments.create(name=f"skills-{agent.id[-8:]}")
    session_id = client.beta.sessions.create(agent=agent.id, environment_id=environment.id).id
    listed = "cd /workspace/skills && find . -mindepth 1 | sort"
    assert bash_turn(client, session_id, listed).split() == [
        f"./{gone}",
        f"./{gone}/SKILL.md",
        f"./{gone}/scripts",
        f"./{gone}/scripts/fill.py",
        f"./{kept}",
        f"./{kept}/SKILL.md",
        f"./{kept}/scripts",
        f"./{kept}/scripts/fill.py",
    ]
    client.beta.skills.delete(gone_skill.id)
    client.beta.skills.versions.create(
        kept_skill.id, files=[(f"{kept}/SKILL.md", skill_files(kept)[0][1])]
    )
    assert bash_turn(client, session_id, listed).split() == [f"./{kept}", f"./{kept}/SKILL.md"]


def test_a_skills_executable_script_runs_and_nothing_in_it_is_writable(
    client: anthropic.Anthropic,
) -> None:
    """Every skill file was mounted 0444, so a script zipped executable failed
    with 'Permission denied' when the agent ran it as the skill says."""
    name = f"run-{uuid.uuid4().hex[:8]}"
    script = f"{name}/scripts/run.sh"
    entries = [
        *skill_files(name),
        (script, b"#!/bin/sh\necho ran-$((6*7))\n"),
        (f"{name}/scripts/plain.sh", b"#!/bin/sh\necho plain\n"),
    ]
    archive = zipped(entries, modes={script: 0o755, f"{name}/scripts/plain.sh": 0o644})
    skill = client.beta.skills.create(files=[("skill.zip", archive, "application/zip")])
    agent = client.beta.agents.create(
        name="skilled",
        model="claude-sonnet-4-6",
        tools=[{"type": "agent_toolset_20260401"}],
        skills=[{"type": "custom", "skill_id": skill.id}],
    )
    environment = client.beta.environments.create(name=f"skills-{agent.id[-8:]}")
    session_id = client.beta.sessions.create(agent=agent.id, environment_id=environment.id).id
    here = f"/workspace/skills/{name}"
    assert bash_turn(client, session_id, f"cd {here} && ./scripts/run.sh") == "ran-42"
    modes = f"cd {here} && stat -c '%a %n' SKILL.md scripts/*"
    assert bash_turn(client, session_id, modes).splitlines() == [
        "444 SKILL.md",
        "444 scripts/fill.py",
        "444 scripts/plain.sh",
        "555 scripts/run.sh",
    ]
    tried = f"cd {here} && ./scripts/plain.sh; echo x >> scripts/run.sh; tail -1 scripts/run.sh"
    refused = bash_turn(client, session_id, tried).splitlines()
    assert refused[0].endswith("./scripts/plain.sh: Permission denied")
    assert refused[1].endswith("scripts/run.sh: Permission denied")
    assert refused[2] == "echo ran-$((6*7))"
    # A new version with the same bytes and the bit gone: the mode follows it.
    client.beta.skills.versions.create(
        skill.id, files=[("skill.zip", zipped(entries), "application/zip")]
    )
    assert bash_turn(client, session_id, f"stat -c %a {here}/scripts/run.sh") == "444"
