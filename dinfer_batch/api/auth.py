"""Who is calling: `Authorization: Bearer <key>` names an owner, and every route works on
that owner's objects only. The database sessions, opened on first use, live here too."""

from __future__ import annotations

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.api.errors import ApiError
from dinfer_batch.api.keys import Caller, caller_of
from dinfer_batch.config import database_url
from dinfer_batch.storage import db
from dinfer_batch.storage.tables import LOCAL_OWNER

bearer = HTTPBearer(auto_error=False, description="An API key from `dinfer-batch keys create`")


def sessions(request: Request) -> sessionmaker[Session]:
    """The app's database sessions; Unavailable (503) while the database is unreachable."""
    state = request.app.state
    if getattr(state, "sessions", None) is None:
        state.sessions = db.ready(database_url())
    return state.sessions


def caller(request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(bearer),
           database: sessionmaker[Session] = Depends(sessions)) -> Caller:
    """The key's holder; with DINFER_BATCH_API_AUTH=off everyone is an admin of owner local."""
    if not request.app.state.auth:
        return Caller(LOCAL_OWNER, admin=True)
    if credentials is None:
        raise ApiError(401, "missing API key: send the header 'Authorization: Bearer <key>' "
                            "(create a key with `dinfer-batch keys create NAME`)",
                       code="missing_api_key")
    found = caller_of(database, credentials.credentials)
    if found is None:
        raise ApiError(401, "invalid or revoked API key", code="invalid_api_key")
    return found


def owner(who: Caller = Depends(caller)) -> str:
    return who.owner


def admin(who: Caller = Depends(caller)) -> Caller:
    """An admin key's holder; any other key gets 403."""
    if not who.admin:
        raise ApiError(403, "this needs an admin key (`dinfer-batch keys create NAME --admin`)",
                       code="admin_key_required")
    return who

