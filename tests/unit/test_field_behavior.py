"""Every field's comment and its `google.api.field_behavior` agree, in the public and internal API.

Read from the descriptor set with source info that `make gen` writes (and reflection serves),
so what is checked is what clients see. A comment states a behavior with a sentence that begins
with it:

- REQUIRED: "Required." (or `,` `;` `:`), "Required (see …)", "Required on create|share|update".
  A requirement with a condition ("Required with FAILED…", "Required except for…", "Required in
  the per-user catalog mode", "Required by most S3-compatible stores") is not REQUIRED (AIP-203:
  such fields are documented, not annotated).
- OUTPUT_ONLY: "Output only".
- OPTIONAL: "Optional".
- IMMUTABLE: the word "immutable" anywhere in the comment.

A field whose comment says one of these must carry it, and a field carrying one must say it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from google.api import field_behavior_pb2
from google.protobuf import descriptor_pb2

from service_runtime.reflection import API_DESCRIPTOR_SET

PACKAGES = ("texera.lake.v1", "texera.lake.internal.v1")
FieldBehavior = field_behavior_pb2.FieldBehavior

#: A sentence starts at the comment's start or after `.` or `;`.
_SENTENCE = r"(?:^|[.;]\s)"
STATED: dict[str, re.Pattern[str]] = {
    "REQUIRED": re.compile(_SENTENCE + r"Required(?:[.,;:]|\s\(|\son\s(?:create|share|update)\b)"),
    "OUTPUT_ONLY": re.compile(_SENTENCE + r"Output only\b"),
    "OPTIONAL": re.compile(_SENTENCE + r"Optional\b"),
    "IMMUTABLE": re.compile(r"\b[Ii]mmutable\b"),
}
# The descriptor's path to a message's fields (DescriptorProto.field) and nested messages
# (DescriptorProto.nested_type), and to a file's messages (FileDescriptorProto.message_type).
_FIELD, _NESTED, _FILE_MESSAGES = 2, 3, 4


def _api_descriptor_set() -> descriptor_pb2.FileDescriptorSet:
    return descriptor_pb2.FileDescriptorSet.FromString(API_DESCRIPTOR_SET.read_bytes())


def _fields(
    file: descriptor_pb2.FileDescriptorProto,
) -> Iterator[tuple[str, descriptor_pb2.FieldDescriptorProto, str]]:
    """(full name, field, leading comment with its whitespace collapsed) of every field."""
    comments = {
        tuple(location.path): " ".join(location.leading_comments.split())
        for location in file.source_code_info.location
    }

    def walk(
        messages: list[descriptor_pb2.DescriptorProto], path: tuple[int, ...], prefix: str
    ) -> Iterator[tuple[str, descriptor_pb2.FieldDescriptorProto, str]]:
        for i, message in enumerate(messages):
            if message.options.map_entry:
                continue  # a map's key and value, made by protoc, have no comments
            message_path = (*path, i)
            for j, field in enumerate(message.field):
                comment = comments.get((*message_path, _FIELD, j), "")
                yield f"{prefix}{message.name}.{field.name}", field, comment
            yield from walk(
                list(message.nested_type), (*message_path, _NESTED), f"{prefix}{message.name}."
            )

    yield from walk(list(file.message_type), (_FILE_MESSAGES,), f"{file.package}.")


def disagreements(descriptor_set: descriptor_pb2.FileDescriptorSet) -> list[str]:
    """One line per field of the API whose comment and field_behavior disagree."""
    found = []
    for file in descriptor_set.file:
        if file.package not in PACKAGES:
            continue
        for name, field, comment in _fields(file):
            carried = {
                FieldBehavior.Name(b)
                for b in field.options.Extensions[field_behavior_pb2.field_behavior]
            }
            stated = {behavior for behavior, said in STATED.items() if said.search(comment)}
            for behavior in sorted(stated - carried):
                found.append(f"{name} ({file.name}): comment says {behavior}, field lacks it")
            for behavior in sorted((carried & STATED.keys()) - stated):
                found.append(f"{name} ({file.name}): has {behavior}, comment does not say so")
    return found


def _field(
    descriptor_set: descriptor_pb2.FileDescriptorSet, full_name: str
) -> descriptor_pb2.FieldDescriptorProto:
    for file in descriptor_set.file:
        for name, field, _ in _fields(file):
            if name == full_name:
                return field
    raise LookupError(full_name)


def test_comments_and_field_behavior_agree() -> None:
    found = disagreements(_api_descriptor_set())
    assert not found, "comments and google.api.field_behavior disagree:\n" + "\n".join(found)


def test_every_field_of_both_packages_is_checked() -> None:
    descriptor_set = _api_descriptor_set()
    checked = {file.package: 0 for file in descriptor_set.file if file.package in PACKAGES}
    annotated = 0
    for file in descriptor_set.file:
        if file.package in PACKAGES:
            for _, field, comment in _fields(file):
                checked[file.package] += 1
                assert comment, f"{file.name}: a field without a comment"
                annotated += bool(field.options.Extensions[field_behavior_pb2.field_behavior])
    assert set(checked) == set(PACKAGES)
    assert all(count > 50 for count in checked.values()), checked
    assert annotated > 100


@pytest.mark.parametrize(
    ("field", "change", "expected"),
    [
        (
            "texera.lake.v1.CreateWarehouseRequest.warehouse",
            "remove",
            "comment says REQUIRED, field lacks it",
        ),
        (
            "texera.lake.v1.ComputingUnit.create_time",
            "remove",
            "comment says OUTPUT_ONLY, field lacks it",
        ),
        (
            "texera.lake.internal.v1.BindExecutionRequest.execution_id",
            "remove",
            "comment says REQUIRED, field lacks it",
        ),
        (
            "texera.lake.internal.v1.UpdateExecutionStateRequest.error",
            "add REQUIRED",
            "has REQUIRED, comment does not say so",
        ),
        (
            "texera.lake.v1.Result.row_count",
            "add OUTPUT_ONLY",
            "has OUTPUT_ONLY, comment does not say so",
        ),
    ],
)
def test_a_disagreement_is_named(field: str, change: str, expected: str) -> None:
    """The check is not vacuous: one annotation removed or added is reported by field name."""
    descriptor_set = _api_descriptor_set()
    options = _field(descriptor_set, field).options
    behaviors = options.Extensions[field_behavior_pb2.field_behavior]
    if change == "remove":
        assert behaviors, f"{field} carries no field_behavior to remove"
        del behaviors[:]
    else:
        behaviors.append(FieldBehavior.Value(change.removeprefix("add ")))
    found = disagreements(descriptor_set)
    assert len(found) == 1, found
    assert found[0].startswith(f"{field} (texera/lake/")
    assert found[0].endswith(f"): {expected}")
