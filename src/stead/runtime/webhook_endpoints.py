"""Registering webhook endpoints: the target checked against the egress rules,
the signing secret made and sealed here (the store sees it only sealed) and
handed back once, at creation and at rotation. Used by the admin route and
``stead webhooks``."""

from __future__ import annotations

from collections.abc import Mapping

from stead.ids import new_id
from stead.runtime.webhook_signing import new_secret, seal_secret
from stead.runtime.webhook_targets import WebhookEgress
from stead.store import WebhookEndpoint, WebhookStore, WorkspaceScope
from stead.vault import SecretBox


class WebhookEndpoints:
    def __init__(self, store: WebhookStore, box: SecretBox, egress: WebhookEgress) -> None:
        self._store = store
        self._box = box
        self._egress = egress

    async def create(
        self, workspace_id: str, fields: Mapping[str, object]
    ) -> tuple[WebhookEndpoint, str]:
        """``fields`` as ``stead.schemas.webhooks.parse_create`` returns them. Raises
        ``RequestError`` when the egress rules refuse the URL."""
        await self._egress.check_target(str(fields["url"]))
        endpoint_id = new_id("webhook")
        secret = new_secret()
        sealed = seal_secret(self._box, endpoint_id, secret)
        endpoint = await self._store.create_webhook_endpoint(
            workspace_id, endpoint_id, fields, sealed
        )
        return endpoint, secret

    async def update(
        self, workspace_id: WorkspaceScope, endpoint_id: str, fields: Mapping[str, object]
    ) -> WebhookEndpoint:
        """``fields`` as ``parse_update`` returns them (``status`` becomes ``enabled``)."""
        change = {key: value for key, value in fields.items() if key != "status"}
        if "status" in fields:
            change["enabled"] = fields["status"] == "enabled"
        if "url" in change:
            await self._egress.check_target(str(change["url"]))
        return await self._store.update_webhook_endpoint(workspace_id, endpoint_id, change)

    async def rotate_secret(
        self, workspace_id: WorkspaceScope, endpoint_id: str
    ) -> tuple[WebhookEndpoint, str]:
        """A new signing secret; deliveries from the next attempt on are signed with it."""
        await self._store.get_webhook_endpoint(workspace_id, endpoint_id)
        secret = new_secret()
        sealed = seal_secret(self._box, endpoint_id, secret)
        endpoint = await self._store.update_webhook_endpoint(
            workspace_id, endpoint_id, {}, sealed_secret=sealed
        )
        return endpoint, secret
