"""Reflection describes what a server serves, with comments, and nothing else."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest
from google.protobuf import descriptor_pb2
from grpc_reflection.v1alpha import reflection_pb2

from service_runtime.reflection import enable_reflection

R = reflection_pb2
Reflection = grpc.aio.StreamStreamMultiCallable[
    R.ServerReflectionRequest, R.ServerReflectionResponse
]


@pytest.fixture(params=["grpc.reflection.v1alpha", "grpc.reflection.v1"])
async def reflection(request: pytest.FixtureRequest) -> AsyncIterator[Reflection]:
    """Reflection in either version of the protocol (the same messages on the wire)."""
    server = grpc.aio.server()
    enable_reflection(["texera.lake.v1.WarehouseService"], server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield channel.stream_stream(
            f"/{request.param}.ServerReflection/ServerReflectionInfo",
            request_serializer=R.ServerReflectionRequest.SerializeToString,
            response_deserializer=R.ServerReflectionResponse.FromString,
        )
    await server.stop(None)


async def _ask(reflection: Reflection, **question: str) -> R.ServerReflectionResponse:
    request = R.ServerReflectionRequest()
    setattr(request, *next(iter(question.items())))
    answers = [answer async for answer in reflection(iter([request]))]
    assert len(answers) == 1
    return answers[0]


def _files(answer: R.ServerReflectionResponse) -> dict[str, descriptor_pb2.FileDescriptorProto]:
    files = [
        descriptor_pb2.FileDescriptorProto.FromString(raw)
        for raw in answer.file_descriptor_response.file_descriptor_proto
    ]
    return {f.name: f for f in files}


async def test_lists_only_the_served_services(
    reflection: Reflection,
) -> None:
    answer = await _ask(reflection, list_services="")
    assert [s.name for s in answer.list_services_response.service] == [
        "grpc.reflection.v1.ServerReflection",
        "grpc.reflection.v1alpha.ServerReflection",
        "texera.lake.v1.WarehouseService",
    ]


async def test_a_method_resolves_to_its_file_with_comments_and_imports(
    reflection: Reflection,
) -> None:
    answer = await _ask(
        reflection, file_containing_symbol="texera.lake.v1.WarehouseService.CreateWarehouse"
    )
    files = _files(answer)
    service_file = files["texera/lake/v1/warehouse_service.proto"]
    assert {"texera/lake/v1/warehouse.proto", "texera/lake/v1/annotations.proto"} <= set(files)
    comments = [loc.leading_comments for loc in service_file.source_code_info.location]
    assert any("nothing was created" in comment for comment in comments)


@pytest.mark.parametrize(
    "question",
    [
        {"file_containing_symbol": "texera.lake.internal.v1.ExecutionLedgerService"},
        {"file_containing_symbol": "texera.lake.internal.v1.BindExecutionRequest"},
        {"file_by_filename": "texera/lake/internal/v1/registry_service.proto"},
    ],
)
async def test_what_is_not_served_is_not_found(
    reflection: Reflection, question: dict[str, str]
) -> None:
    answer = await _ask(reflection, **question)
    assert answer.error_response.error_code == grpc.StatusCode.NOT_FOUND.value[0]


async def test_extensions_of_a_served_file_are_known(
    reflection: Reflection,
) -> None:
    answer = await _ask(reflection, all_extension_numbers_of_type="google.protobuf.FieldOptions")
    assert answer.all_extension_numbers_response.extension_number  # (texera.lake.v1.sensitive)


async def test_fields_carry_no_json_name_so_clients_print_the_proto_names(
    reflection: Reflection,
) -> None:
    answer = await _ask(
        reflection, file_containing_symbol="texera.lake.v1.WarehouseService.CreateWarehouse"
    )

    def fields(messages: list[descriptor_pb2.DescriptorProto]) -> list[str]:
        return [
            f.json_name
            for m in messages
            for f in (*m.field, *m.extension)
            if f.HasField("json_name")
        ] + [name for m in messages for name in fields(list(m.nested_type))]

    for file in _files(answer).values():
        assert fields(list(file.message_type)) == [], file.name


DETAILS = ["ErrorInfo", "BadRequest", "ResourceInfo", "RetryInfo", "Status"]


@pytest.mark.parametrize("detail", [f"google.rpc.{name}" for name in DETAILS])
async def test_the_types_of_an_errors_details_are_described(
    reflection: Reflection, detail: str
) -> None:
    """A client renders an error's details only once it can resolve their types."""
    files = _files(await _ask(reflection, file_containing_symbol=detail))
    described = {f"{f.package}.{m.name}" for f in files.values() for m in f.message_type}
    assert detail in described


async def test_the_stable_version_describes_itself(reflection: Reflection) -> None:
    answer = await _ask(reflection, file_containing_symbol="grpc.reflection.v1.ServerReflection")
    [v1] = [f for f in _files(answer).values() if f.package == "grpc.reflection.v1"]
    assert [m.name for m in v1.service[0].method] == ["ServerReflectionInfo"]
    assert v1.service[0].method[0].input_type == ".grpc.reflection.v1.ServerReflectionRequest"
