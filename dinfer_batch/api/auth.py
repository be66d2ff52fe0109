"""Who is calling: `Authorization: Bearer <key>` names an owner, and every route works on
that owner's objects only. The key is checked by the gate (api/gate.py) before the body
is read; the routes take the caller it found. The database sessions, opened on first use,
and the settings and broker the app was made with, live here too."""

from __future__ import annotations

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session, sessionmaker
from starlette.datastructures import State

from dinfer_batch.api.errors import ApiError
from dinfer_batch.api.keys import Caller, caller_of
from dinfer_batch.config import Settings
from dinfer_batch.storage import db
from dinfer_batch.storage.tables import LOCAL_OWNER
from dinfer_workers.broker import Broker

bearer = HTTPBearer(auto_error=False, description="An API key from `dinfer-batch keys create`")


def app_sessions(state: State) -> sessionmaker[Session]:
    """The app's database sessions; Unavailable (503) while the database is unreachable."""
    if getattr(state, "sessions", None) is None:
        state.sessions = db.ready_for(state.settings)
    return state.sessions


def sessions(request: Request) -> sessionmaker[Session]:
    return app_sessions(request.app.state)


def app_settings(request: Request) -> Settings:
    """The settings the app was made with (server.create_app, the process's entry)."""
    settings: Settings = request.app.state.settings
    return settings


def app_broker(request: Request) -> Broker:
    """The broker the app was made with (server.create_app), its Celery app among them."""
    broker: Broker = request.app.state.broker
    return broker


def identify(state: State, authorization: str | None) -> Caller:
    """The holder of the key in an `Authorization` header (ApiError 401 otherwise); with
    DINFER_BATCH_API_AUTH=off everyone is an admin of owner local. Blocking (one query)."""
    if not state.auth:
        return Caller(LOCAL_OWNER, admin=True)
    scheme, _, secret = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        raise ApiError(401, "missing API key: send the header 'Authorization: Bearer <key>' "
                            "(create a key with `dinfer-batch keys create NAME`)",
                       code="missing_api_key")
    found = caller_of(app_sessions(state), secret.strip())
    if found is None:
        raise ApiError(401, "invalid or revoked API key", code="invalid_api_key")
    return found


def caller(request: Request,
           _credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> Caller:
    """The caller the gate identified (`_credentials` only documents the scheme); a route
    outside the gate's paths identifies its caller here."""
    found = getattr(request.state, "caller", None)
    if found is None:
        found = identify(request.app.state, request.headers.get("authorization"))
    return found


def owner(who: Caller = Depends(caller)) -> str:
    return who.owner


def admin(who: Caller = Depends(caller)) -> Caller:
    """An admin key's holder; any other key gets 403."""
    if not who.admin:
        raise ApiError(403, "this needs an admin key (`dinfer-batch keys create NAME --admin`)",
                       code="admin_key_required")
    return who
