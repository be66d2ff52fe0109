"""Who is calling: `Authorization: Bearer <key>` names an owner, and every route works on
that owner's objects only. The database sessions, opened on first use, live here too."""

from __future__ import annotations

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.api.errors import ApiError
from dinfer_batch.api.keys import owner_of
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


def owner(request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(bearer),
          database: sessionmaker[Session] = Depends(sessions)) -> str:
    if not request.app.state.auth:
        return LOCAL_OWNER
    if credentials is None:
        raise ApiError(401, "missing API key: send the header 'Authorization: Bearer <key>' "
                            "(create a key with `dinfer-batch keys create NAME`)",
                       code="missing_api_key")
    found = owner_of(database, credentials.credentials)
    if found is None:
        raise ApiError(401, "invalid or revoked API key", code="invalid_api_key")
    return found

