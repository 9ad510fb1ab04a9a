"""/openapi.json describes what the server serves and accepts."""

from __future__ import annotations

import re
from typing import Any

import httpx2

from stead.testing import ServerProcess, client_tls

ROUTES = {
    ("get", "/healthz"): None,
    ("get", "/readyz"): None,
    ("get", "/metrics"): None,
    ("post", "/v1/agents"): "AgentCreateParams",
    ("get", "/v1/agents"): None,
    ("get", "/v1/agents/{agent_id}"): None,
    ("post", "/v1/agents/{agent_id}"): "AgentUpdateParams",
    ("post", "/v1/agents/{agent_id}/archive"): None,
    ("get", "/v1/agents/{agent_id}/versions"): None,
    ("post", "/v1/environments"): "EnvironmentCreateParams",
    ("get", "/v1/environments"): None,
    ("get", "/v1/environments/{environment_id}"): None,
    ("post", "/v1/environments/{environment_id}"): "EnvironmentUpdateParams",
    ("delete", "/v1/environments/{environment_id}"): None,
    ("post", "/v1/environments/{environment_id}/archive"): None,
    ("post", "/v1/sessions"): "SessionCreateParams",
    ("get", "/v1/sessions"): None,
    ("get", "/v1/sessions/{session_id}"): None,
    ("post", "/v1/sessions/{session_id}"): "SessionUpdateParams",
    ("delete", "/v1/sessions/{session_id}"): None,
    ("post", "/v1/sessions/{session_id}/archive"): None,
    ("post", "/v1/sessions/{session_id}/events"): "EventSendParams",
    ("get", "/v1/sessions/{session_id}/events"): None,
    ("get", "/v1/sessions/{session_id}/events/stream"): None,
    ("get", "/v1/sessions/{session_id}/threads"): None,
    ("get", "/v1/sessions/{session_id}/threads/{thread_id}"): None,
    ("post", "/v1/sessions/{session_id}/threads/{thread_id}/archive"): None,
    ("get", "/v1/sessions/{session_id}/threads/{thread_id}/events"): None,
    ("get", "/v1/sessions/{session_id}/threads/{thread_id}/stream"): None,
    ("get", "/v1/sessions/{session_id}/sandbox"): None,
    ("post", "/v1/vaults"): "VaultCreateParams",
    ("get", "/v1/vaults"): None,
    ("get", "/v1/vaults/{vault_id}"): None,
    ("post", "/v1/vaults/{vault_id}"): "VaultUpdateParams",
    ("delete", "/v1/vaults/{vault_id}"): None,
    ("post", "/v1/vaults/{vault_id}/archive"): None,
    ("post", "/v1/vaults/{vault_id}/credentials"): "CredentialCreateParams",
    ("get", "/v1/vaults/{vault_id}/credentials"): None,
    ("get", "/v1/vaults/{vault_id}/credentials/{credential_id}"): None,
    ("post", "/v1/vaults/{vault_id}/credentials/{credential_id}"): "CredentialUpdateParams",
    ("delete", "/v1/vaults/{vault_id}/credentials/{credential_id}"): None,
    ("post", "/v1/vaults/{vault_id}/credentials/{credential_id}/archive"): None,
    ("post", "/v1/vaults/{vault_id}/credentials/{credential_id}/mcp_oauth_validate"): None,
    ("delete", "/v1/sessions/{session_id}/sandbox"): None,
    ("get", "/v1/sessions/{session_id}/sandbox/egress"): None,
    ("post", "/v1/sessions/{session_id}/terminate"): None,
    ("get", "/v1/usage"): None,
    ("get", "/v1/stead/limits"): None,
    ("get", "/v1/stead/workspaces/{workspace_id}/limits"): None,
    ("post", "/v1/stead/workspaces/{workspace_id}/limits"): None,
    ("get", "/v1/stead/workspaces/{workspace_id}/environments/{environment_id}/limits"): None,
    ("post", "/v1/stead/workspaces/{workspace_id}/environments/{environment_id}/limits"): None,
    # webhooks
    ("post", "/v1/stead/webhooks"): "WebhookCreateParams",
    ("get", "/v1/stead/webhooks"): None,
    ("get", "/v1/stead/webhooks/{webhook_id}"): None,
    ("post", "/v1/stead/webhooks/{webhook_id}"): "WebhookUpdateParams",
    ("delete", "/v1/stead/webhooks/{webhook_id}"): None,
    ("post", "/v1/stead/webhooks/{webhook_id}/rotate_secret"): None,
    ("get", "/v1/stead/webhooks/{webhook_id}/deliveries"): None,
    ("get", "/v1/environments/{environment_id}/work/poll"): None,
    ("get", "/v1/environments/{environment_id}/work/stats"): None,
    ("get", "/v1/environments/{environment_id}/work"): None,
    ("get", "/v1/environments/{environment_id}/work/{work_id}"): None,
    ("post", "/v1/environments/{environment_id}/work/{work_id}"): "WorkUpdateParams",
    ("post", "/v1/environments/{environment_id}/work/{work_id}/ack"): None,
    ("post", "/v1/environments/{environment_id}/work/{work_id}/heartbeat"): None,
    ("post", "/v1/environments/{environment_id}/work/{work_id}/stop"): "WorkStopParams",
    ("post", "/v1/environments/{environment_id}/keys"): None,
    ("post", "/v1/environments/{environment_id}/keys/{key_id}/revoke"): None,
    ("post", "/v1/files"): None,
    ("get", "/v1/files"): None,
    ("get", "/v1/files/{file_id}"): None,
    ("get", "/v1/files/{file_id}/content"): None,
    ("delete", "/v1/files/{file_id}"): None,
    ("post", "/v1/sessions/{session_id}/resources"): "ResourceAddParams",
    ("get", "/v1/sessions/{session_id}/resources"): None,
    ("get", "/v1/sessions/{session_id}/resources/{resource_id}"): None,
    ("post", "/v1/sessions/{session_id}/resources/{resource_id}"): "ResourceUpdateParams",
    ("delete", "/v1/sessions/{session_id}/resources/{resource_id}"): None,
    ("post", "/v1/skills"): None,
    ("get", "/v1/skills"): None,
    ("get", "/v1/skills/{skill_id}"): None,
    ("delete", "/v1/skills/{skill_id}"): None,
    ("post", "/v1/skills/{skill_id}/versions"): None,
    ("get", "/v1/skills/{skill_id}/versions"): None,
    ("get", "/v1/skills/{skill_id}/versions/{version}"): None,
    ("delete", "/v1/skills/{skill_id}/versions/{version}"): None,
    ("get", "/v1/skills/{skill_id}/versions/{version}/content"): None,
    ("post", "/v1/memory_stores"): "MemoryStoreCreateParams",
    ("get", "/v1/memory_stores"): None,
    ("get", "/v1/memory_stores/{memory_store_id}"): None,
    ("post", "/v1/memory_stores/{memory_store_id}"): "MemoryStoreUpdateParams",
    ("delete", "/v1/memory_stores/{memory_store_id}"): None,
    ("post", "/v1/memory_stores/{memory_store_id}/archive"): None,
    ("post", "/v1/memory_stores/{memory_store_id}/memories"): "MemoryCreateParams",
    ("get", "/v1/memory_stores/{memory_store_id}/memories"): None,
    ("get", "/v1/memory_stores/{memory_store_id}/memories/{memory_id}"): None,
    ("post", "/v1/memory_stores/{memory_store_id}/memories/{memory_id}"): "MemoryUpdateParams",
    ("delete", "/v1/memory_stores/{memory_store_id}/memories/{memory_id}"): None,
    ("get", "/v1/memory_stores/{memory_store_id}/memory_versions"): None,
    ("get", "/v1/memory_stores/{memory_store_id}/memory_versions/{memory_version_id}"): None,
    (
        "post",
        "/v1/memory_stores/{memory_store_id}/memory_versions/{memory_version_id}/redact",
    ): None,
    ("post", "/v1/memory_stores/{memory_store_id}/search"): None,
}


def _resolve(document: dict[str, Any], ref: str) -> dict[str, Any]:
    node: Any = document
    for part in ref.removeprefix("#/").split("/"):
        node = node[part]
    return node  # type: ignore[no-any-return]


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [r for value in node.values() for r in _refs(value)]
    if isinstance(node, list):
        return [r for value in node for r in _refs(value)]
    return []


def openapi_document(server: ServerProcess) -> dict[str, Any]:
    """The server's /openapi.json; building it the first time takes a while on a busy machine."""
    return dict(httpx2.get(f"{server.url}/openapi.json", timeout=30, verify=client_tls()).json())


def test_every_route_and_body_is_described(server: ServerProcess) -> None:
    document = openapi_document(server)
    served = {
        (method, path)
        for path, item in document["paths"].items()
        for method in item
        if not method.startswith("x-")
    }
    assert served == set(ROUTES)
    for (method, path), body in ROUTES.items():
        operation = document["paths"][path][method]
        if body is None:
            assert "requestBody" not in operation, (method, path)
            continue
        schema_ref = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        schema = _resolve(document, schema_ref)
        assert schema_ref.endswith("/" + body)
        assert schema["type"] == "object"
        assert schema["additionalProperties"] is False, "unknown fields are rejected"
    for ref in _refs(document):
        _resolve(document, ref)  # every reference resolves


def test_query_parameters_use_the_wire_names(server: ServerProcess) -> None:
    document = openapi_document(server)
    listed = document["paths"]["/v1/sessions"]["get"]["parameters"]
    names = {p["name"] for p in listed}
    assert {"statuses[]", "created_at[gte]", "order", "page", "limit"} <= names
    events = document["paths"]["/v1/sessions/{session_id}/events"]["get"]["parameters"]
    assert "types[]" in {p["name"] for p in events}


def test_each_route_lists_the_statuses_it_answers_with_the_error_envelope(
    server: ServerProcess,
) -> None:
    document = openapi_document(server)
    assert document["components"]["securitySchemes"]["ApiKey"] == {
        "type": "apiKey",
        "in": "header",
        "name": "x-api-key",
    }
    assert {"ApiKey": []} in document["security"]
    for method, path in ROUTES:
        operation = document["paths"][path][method]
        answers = operation["responses"]
        assert "422" not in answers, (method, path)
        if operation.get("security") == []:
            continue  # the health checks (test_health_checks_ask_for_no_key)
        expected = {"400", "401", "403", "503"} | ({"404"} if "{" in path else set())
        expected |= {"413", "415"} if ROUTES[method, path] else set()
        assert expected <= set(answers), (method, path, sorted(answers))
        for status, answer in answers.items():
            if status.startswith("4"):
                schema = answer["content"]["application/json"]["schema"]
                assert schema == {"$ref": "#/components/schemas/Error"}, (method, path, status)
    assert "409" in document["paths"]["/v1/sessions/{session_id}"]["delete"]["responses"]
    assert "404" in document["paths"]["/v1/sessions"]["post"]["responses"]


def test_the_terminal_websockets_are_described(server: ServerProcess) -> None:
    document = openapi_document(server)
    for kind in ("exec", "pty"):
        item = document["paths"][f"/v1/sessions/{{session_id}}/sandbox/{kind}"]
        assert set(item) == {"x-websocket"}, "no HTTP operation: the route answers none"
        described = item["x-websocket"]
        assert "0x03" in described["description"] and described["security"]
        assert {p["name"] for p in described["parameters"]} >= {"session_id", "id", "offset"}


def test_health_checks_ask_for_no_key(server: ServerProcess) -> None:
    document = openapi_document(server)
    for path in ("/healthz", "/readyz"):
        operation = document["paths"][path]["get"]
        assert operation["security"] == []
        assert "401" not in operation["responses"]
    assert "503" in document["paths"]["/readyz"]["get"]["responses"]


def test_docs_render_from_shipped_assets(server: ServerProcess) -> None:
    for page in ("/docs", "/redoc"):
        html = httpx2.get(f"{server.url}{page}", timeout=30, verify=client_tls()).text
        sources = re.findall(r'(?:src|href)="([^"]+)"', html)
        assert sources, html
        for source in sources:
            assert source.startswith("/"), f"{page} loads {source} from elsewhere"
            answer = httpx2.get(f"{server.url}{source}", timeout=30, verify=client_tls())
            assert answer.status_code == 200 and answer.content, source
