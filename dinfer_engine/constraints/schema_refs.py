"""Where a JSON schema's `$ref`s point: every reference resolved to a JSON pointer into
the schema itself, through `$id`/`id` base URIs and `$anchor` / fragment-id names
(draft-04 to 2020-12), so that schema.py can hand llguidance plain `#/$defs/...`
references and drop the ids. References to other documents cannot be resolved."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urldefrag, urljoin

from dinfer_engine.constraints.schema_keywords import ONE_SCHEMA, SCHEMA_LISTS, SCHEMA_MAPS
from dinfer_engine.constraints.spec_errors import ConstraintError

Pointer = tuple[str, ...]


class References:
    """The schema's resources (absolute URI -> pointer), anchors ((URI, name) ->
    pointer) and each schema position's base URI."""

    def __init__(self, root: Any) -> None:
        self.root = root
        self.resources: dict[str, Pointer] = {}
        self.anchors: dict[tuple[str, str], Pointer] = {}
        self.bases: dict[Pointer, str] = {}
        self._index(root, (), "")

    def _index(self, node: Any, pointer: Pointer, base: str) -> None:
        if not isinstance(node, dict):
            return
        own = node.get("$id", node.get("id"))
        if isinstance(own, str):
            uri, fragment = urldefrag(urljoin(base, own))
            if uri or not fragment:
                base = uri
                self.resources.setdefault(uri, pointer)
            if fragment and not fragment.startswith("/"):
                self.anchors[(base, fragment)] = pointer  # draft-04..07 "id": "#name"
        elif not pointer:
            self.resources[""] = ()
        for key in ("$anchor", "$dynamicAnchor"):
            if isinstance(node.get(key), str):
                self.anchors[(base, node[key])] = pointer
        self.bases[pointer] = base
        for key, value in node.items():
            if key in ONE_SCHEMA or key == "items":
                if isinstance(value, list):
                    for i, item in enumerate(value):
                        self._index(item, (*pointer, key, str(i)), base)
                else:
                    self._index(value, (*pointer, key), base)
            elif key in SCHEMA_LISTS and isinstance(value, list):
                for i, item in enumerate(value):
                    self._index(item, (*pointer, key, str(i)), base)
            elif (key in SCHEMA_MAPS or key == "dependencies") and isinstance(value, dict):
                for name, item in value.items():
                    self._index(item, (*pointer, key, name), base)

    def base(self, pointer: Pointer) -> str:
        return self.bases.get(pointer, self.bases.get((), ""))

    def resolve(self, ref: str, base: str, where: str) -> Pointer:
        """The pointer `ref` (read at a position whose base URI is `base`) names."""
        uri, fragment = urldefrag(urljoin(base, ref))
        fragment = unquote(fragment)
        document = self.resources.get(uri)
        if document is None and uri == self.bases.get((), ""):
            document = ()
        if document is None:
            raise ConstraintError(f"{where}: $ref {ref!r} points outside the schema; only "
                                  "references within it are supported")
        if not fragment:
            return document
        if not fragment.startswith("/"):
            anchored = self.anchors.get((uri, fragment))
            if anchored is None:
                raise ConstraintError(f"{where}: $ref {ref!r}: no anchor {fragment!r}")
            return anchored
        pointer = (*document, *(part.replace("~1", "/").replace("~0", "~")
                                for part in fragment[1:].split("/")))
        if self.at(pointer) is _MISSING:
            raise ConstraintError(f"{where}: $ref {ref!r} points to nothing")
        return pointer

    def at(self, pointer: Pointer) -> Any:
        """The value at `pointer`, or _MISSING."""
        node = self.root
        for part in pointer:
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return _MISSING
        return node


_MISSING = object()
