"""Server reflection limited to what a server serves, with the API's documentation.

Clients such as grpcurl `list` and `describe` through it, in either version of the protocol
(`grpc.reflection.v1`, and `v1alpha` for older clients; their messages are the same on the
wire). It answers only with the files of the services this server serves, the files they
import, and the types an error's details carry (`google.rpc`), so that a client renders
ErrorInfo, BadRequest, ResourceInfo and RetryInfo; a server never describes a service it does
not serve (the gateway hides the internal registry API). The API's files come from the descriptor set that
scripts/gen_protos.py writes with source info, so `describe` shows every
element's comment; other files (health, reflection) come from the default pool.
Method names resolve to their service's file, which the default pool's lookup
does not do in Python (grpc/grpc#34743).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from google.rpc import error_details_pb2, status_pb2
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

import texera.lake

#: The API's files with their comments, written by `make gen` beside the generated code.
API_DESCRIPTOR_SET = Path(texera.lake.__file__).parent / "api_descriptor_set.binpb"
SERVICE_NAME: str = reflection_pb2.DESCRIPTOR.services_by_name["ServerReflection"].full_name
V1_PACKAGE = "grpc.reflection.v1"
V1_SERVICE_NAME = f"{V1_PACKAGE}.ServerReflection"
#: Files of the types an error's details may carry (see service_runtime.errors).
DETAIL_FILES = (status_pb2.DESCRIPTOR.name, error_details_pb2.DESCRIPTOR.name)


def _v1_file() -> descriptor_pb2.FileDescriptorProto:
    """grpc.reflection.v1's file, made from v1alpha's (grpcio-reflection ships only that one):
    the same messages and service under the stable package."""
    proto = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(proto)
    alpha = f".{proto.package}."
    proto.name = "grpc/reflection/v1/reflection.proto"
    proto.package = V1_PACKAGE
    proto.ClearField("options")
    for message in proto.message_type:
        for field in message.field:
            if field.HasField("type_name"):
                field.type_name = field.type_name.replace(alpha, f".{V1_PACKAGE}.")
    for method in proto.service[0].method:
        method.input_type = method.input_type.replace(alpha, f".{V1_PACKAGE}.")
        method.output_type = method.output_type.replace(alpha, f".{V1_PACKAGE}.")
    return proto


def _without_json_names(messages: Iterable[descriptor_pb2.DescriptorProto]) -> None:
    for message in messages:
        for field in (*message.field, *message.extension):
            field.ClearField("json_name")
        _without_json_names(message.nested_type)


def _api_files() -> dict[str, descriptor_pb2.FileDescriptorProto]:
    """The API's files; each field without the JSON name protoc's descriptor sets spell out.

    Clients that print JSON from reflected descriptors (grpcurl) print a field's JSON name
    when it is given and its proto name otherwise; the proto names are the ones the API's
    documentation and the README's journeys use (and that those clients always accept)."""
    descriptor_set = descriptor_pb2.FileDescriptorSet.FromString(API_DESCRIPTOR_SET.read_bytes())
    for file in descriptor_set.file:
        _without_json_names(file.message_type)
        for extension in file.extension:
            extension.ClearField("json_name")
    return {file.name: file for file in descriptor_set.file}


def _default_file(name: str) -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto()
    descriptor_pool.Default().FindFileByName(name).CopyToProto(proto)
    return proto


class ServedFiles:
    """The files that describe a set of services, each after the files it imports."""

    def __init__(self, service_names: Iterable[str]) -> None:
        self.service_names = sorted(service_names)
        v1 = _v1_file()
        api = {**_api_files(), v1.name: v1}
        self._protos: dict[str, descriptor_pb2.FileDescriptorProto] = {}

        def add(name: str) -> None:
            if name in self._protos:
                return
            proto = api[name] if name in api else _default_file(name)
            for dependency in proto.dependency:
                add(dependency)
            self._protos[name] = proto

        api_services = {f"{f.package}.{s.name}": f.name for f in api.values() for s in f.service}
        default = descriptor_pool.Default()
        for service in self.service_names:
            add(api_services.get(service) or default.FindServiceByName(service).file.name)
        for name in DETAIL_FILES:
            add(name)
        self.pool = descriptor_pool.DescriptorPool()
        for proto in self._protos.values():  # dependencies first, as the pool needs
            self.pool.Add(proto)
        self._serialized = {name: p.SerializeToString() for name, p in self._protos.items()}

    def with_imports(self, name: str) -> list[bytes]:
        """The file and every file it imports, directly or not; KeyError if not served."""
        found: dict[str, bytes] = {}
        pending = [name]
        while pending:
            current = pending.pop()
            if current not in found:
                found[current] = self._serialized[current]
                pending += self._protos[current].dependency
        return list(found.values())

    def file_of(self, symbol: str) -> str:
        """The served file that defines a message, enum, service, method or extension."""
        try:
            return str(self.pool.FindFileContainingSymbol(symbol).name)
        except KeyError:
            return str(self.pool.FindMethodByName(symbol).containing_service.file.name)


class ReflectionServicer(reflection_pb2_grpc.ServerReflectionServicer):
    """grpc.reflection.v1alpha over the served files."""

    def __init__(self, files: ServedFiles) -> None:
        self._files = files

    async def ServerReflectionInfo(
        self, request_iterator: AsyncIterator[reflection_pb2.ServerReflectionRequest], context: Any
    ) -> AsyncIterator[reflection_pb2.ServerReflectionResponse]:
        async for request in request_iterator:
            try:
                response = self._answer(request)
            except KeyError:
                response = _error(request, grpc.StatusCode.NOT_FOUND)
            response.original_request.CopyFrom(request)
            yield response

    def _answer(
        self, request: reflection_pb2.ServerReflectionRequest
    ) -> reflection_pb2.ServerReflectionResponse:
        asked = request.WhichOneof("message_request")
        files, pool = self._files, self._files.pool
        if asked == "file_by_filename":
            return _files(files.with_imports(request.file_by_filename))
        if asked == "file_containing_symbol":
            return _files(files.with_imports(files.file_of(request.file_containing_symbol)))
        if asked == "file_containing_extension":
            wanted = request.file_containing_extension
            message = pool.FindMessageTypeByName(wanted.containing_type)
            extension = pool.FindExtensionByNumber(message, wanted.extension_number)
            return _files(files.with_imports(files.file_of(extension.full_name)))
        if asked == "all_extension_numbers_of_type":
            message = pool.FindMessageTypeByName(request.all_extension_numbers_of_type)
            numbers = sorted(e.number for e in pool.FindAllExtensions(message))
            return reflection_pb2.ServerReflectionResponse(
                all_extension_numbers_response=reflection_pb2.ExtensionNumberResponse(
                    base_type_name=message.full_name, extension_number=numbers
                )
            )
        if asked == "list_services":
            return reflection_pb2.ServerReflectionResponse(
                list_services_response=reflection_pb2.ListServiceResponse(
                    service=[reflection_pb2.ServiceResponse(name=n) for n in files.service_names]
                )
            )
        return _error(request, grpc.StatusCode.INVALID_ARGUMENT)


def _files(serialized: list[bytes]) -> reflection_pb2.ServerReflectionResponse:
    return reflection_pb2.ServerReflectionResponse(
        file_descriptor_response=reflection_pb2.FileDescriptorResponse(
            file_descriptor_proto=serialized
        )
    )


def _error(
    request: reflection_pb2.ServerReflectionRequest, code: grpc.StatusCode
) -> reflection_pb2.ServerReflectionResponse:
    return reflection_pb2.ServerReflectionResponse(
        error_response=reflection_pb2.ErrorResponse(
            error_code=code.value[0],
            error_message=f"{code.name}: {request.WhichOneof('message_request')}",
        )
    )


def enable_reflection(service_names: Iterable[str], server: grpc.aio.Server) -> None:
    """Serves reflection of the named services (and of reflection itself, both versions) on
    server."""
    servicer = ReflectionServicer(ServedFiles([*service_names, SERVICE_NAME, V1_SERVICE_NAME]))
    add = reflection_pb2_grpc.add_ServerReflectionServicer_to_server  # untyped upstream
    add(servicer, server)  # type: ignore[no-untyped-call]
    v1 = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(V1_SERVICE_NAME, {"ServerReflectionInfo": v1}),)
    )
