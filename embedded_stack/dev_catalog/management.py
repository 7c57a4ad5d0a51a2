"""Lakekeeper's management API (v0.13.3): bootstrap, warehouses (a protected warehouse is
not deleted, as Lakekeeper's delete without `force`) and an operator's provisioning of users
(answered only: permission assignments name principals directly, so no user record is kept)."""

from __future__ import annotations

from datetime import UTC, datetime

from aiohttp import web

from embedded_stack.dev_catalog.errors import bad_request
from embedded_stack.dev_catalog.model import AccessKeyCredential, S3Profile
from embedded_stack.dev_catalog.permissions import Assignments
from embedded_stack.dev_catalog.state import CatalogState, json_body, project_of
from embedded_stack.dev_catalog.storage import validate_access
from embedded_stack.dev_catalog.store import check_warehouse_name

_STATUSES = ("active", "inactive")


class ManagementApi:
    def __init__(self, state: CatalogState, assignments: Assignments) -> None:
        self.state = state
        self.assignments = assignments

    def routes(self) -> list[web.RouteDef]:
        base = "/management/v1"
        one = base + "/warehouse/{warehouse_id}"
        return [
            web.post(base + "/bootstrap", self.bootstrap),
            web.post(base + "/user", self.provision_user),
            web.post(base + "/warehouse", self.create_warehouse),
            web.get(base + "/warehouse", self.list_warehouses),
            web.get(one, self.get_warehouse),
            web.delete(one, self.delete_warehouse),
            web.post(one + "/storage-credential", self.update_storage_credential),
            web.post(one + "/deactivate", self.deactivate_warehouse),
            web.post(one + "/activate", self.activate_warehouse),
            web.post(one + "/rename", self.rename_warehouse),
            web.post(one + "/protection", self.set_protection),
            web.post(one + "/delete-profile", self.set_delete_profile),
        ]

    async def bootstrap(self, request: web.Request) -> web.Response:
        body = await json_body(request)
        if body.get("accept-terms-of-use") is not True:
            raise bad_request("TermsOfUseNotAccepted", "accept-terms-of-use must be true")
        if not await self.state.run(self.state.store.bootstrap):
            raise bad_request("CatalogAlreadyBootstrapped", "Catalog already bootstrapped")
        # As in Lakekeeper, whoever bootstraps the catalog becomes its server admin.
        await self.state.run(self.assignments.grant_admin, request["principal"].user_id)
        return web.Response(status=204)

    async def provision_user(self, request: web.Request) -> web.Response:
        body = await json_body(request)
        user_id = body.get("id")
        if not isinstance(user_id, str) or "~" not in user_id:
            raise bad_request("BadRequestException", "a user is provisioned by its id, <idp>~<sub>")
        user_type = body.get("user-type") or "application"
        if user_type not in ("application", "human"):
            raise bad_request("BadRequestException", "user-type is application or human")
        user = {
            "id": user_id,
            "name": str(body.get("name") or user_id.split("~", 1)[1]),
            "user-type": user_type,
            "last-updated-with": "create-endpoint",
            "created-at": datetime.now(UTC).isoformat(),
        }
        return web.json_response(user, status=201)

    async def create_warehouse(self, request: web.Request) -> web.Response:
        body = await json_body(request)
        project = project_of(request, body.get("project-id"))
        if not await self.state.run(self.state.store.bootstrapped):
            raise bad_request("CatalogNotBootstrapped", "the catalog must be bootstrapped first")
        name = check_warehouse_name(body.get("warehouse-name"))
        _check_delete_profile(body.get("delete-profile", {"type": "hard"}))
        profile = S3Profile.from_json(body.get("storage-profile"))
        credential = self._credential(body.get("storage-credential"))
        await self.state.run(validate_access, profile, credential, self.state.guard)
        sealed = self.state.cipher.seal(credential.to_record())
        record = await self.state.run(self.state.store.create, project, name, profile, sealed)
        return web.json_response(record.to_json(), status=201)

    @staticmethod
    def _credential(body: object) -> AccessKeyCredential:
        if body is None:
            raise bad_request(
                "InvalidStorageCredential",
                "storage-credential is required: this catalog reaches storage with an access key",
            )
        return AccessKeyCredential.from_json(body)

    async def list_warehouses(self, request: web.Request) -> web.Response:
        statuses = request.query.getall("warehouseStatus", ["active"])
        if unknown := set(statuses) - set(_STATUSES):
            raise bad_request("BadRequestException", f"unknown warehouseStatus {sorted(unknown)}")
        project = project_of(request, request.query.get("projectId"))
        records = await self.state.run(self.state.store.list, project, statuses)
        return web.json_response({"warehouses": [record.to_json() for record in records]})

    async def get_warehouse(self, request: web.Request) -> web.Response:
        record = await self.state.warehouse(request.match_info["warehouse_id"])
        return web.json_response(record.to_json())

    async def delete_warehouse(self, request: web.Request) -> web.Response:
        record = await self.state.warehouse(request.match_info["warehouse_id"])
        await self.state.run(self.state.store.delete, record.id)
        await self.state.run(self.assignments.forget, record.id)
        self.state.catalogs.forget(record.id)
        return web.Response(status=204)

    async def update_storage_credential(self, request: web.Request) -> web.Response:
        record = await self.state.warehouse(request.match_info["warehouse_id"])
        credential = self._credential((await json_body(request)).get("new-storage-credential"))
        await self.state.run(validate_access, record.profile, credential, self.state.guard)
        sealed = self.state.cipher.seal(credential.to_record())
        updated = await self.state.run(self.state.store.replace_credential, record.id, sealed)
        self.state.catalogs.forget(record.id)
        return web.json_response(updated.to_json())

    async def deactivate_warehouse(self, request: web.Request) -> web.Response:
        return await self._set_status(request, "inactive")

    async def activate_warehouse(self, request: web.Request) -> web.Response:
        return await self._set_status(request, "active")

    async def _set_status(self, request: web.Request, status: str) -> web.Response:
        record = await self.state.warehouse(request.match_info["warehouse_id"])
        await self.state.run(self.state.store.set_status, record.id, status)
        return web.Response(status=200)

    async def set_protection(self, request: web.Request) -> web.Response:
        record = await self.state.warehouse(request.match_info["warehouse_id"])
        protected = (await json_body(request)).get("protected")
        if not isinstance(protected, bool):
            raise bad_request("BadRequestException", "protected must be true or false")
        updated = await self.state.run(self.state.store.set_protected, record.id, protected)
        return web.json_response({"protected": updated.protected, "updated_at": None})

    async def set_delete_profile(self, request: web.Request) -> web.Response:
        record = await self.state.warehouse(request.match_info["warehouse_id"])
        _check_delete_profile((await json_body(request)).get("delete-profile"))
        return web.json_response(record.to_json())

    async def rename_warehouse(self, request: web.Request) -> web.Response:
        record = await self.state.warehouse(request.match_info["warehouse_id"])
        name = check_warehouse_name((await json_body(request)).get("new-name"))
        renamed = await self.state.run(self.state.store.rename, record.id, name)
        return web.json_response(renamed.to_json())


def _check_delete_profile(profile: object) -> None:
    """A TabularDeleteProfile this catalog keeps: it drops tables at once, so only hard (a soft
    profile, which Lakekeeper keeps tables under for a while, is refused as unsupported)."""
    if not isinstance(profile, dict) or profile.get("type") not in ("hard", "soft"):
        raise bad_request("BadRequestException", "delete-profile must be of type hard or soft")
    if profile["type"] == "soft":
        raise bad_request(
            "BadRequestException", "this development catalog drops tables at once: hard only"
        )
