"""Responses already in protobuf wire format, sent without another serialization.

A handler that builds a large response from bytes it already holds (an Arrow
IPC payload, or a message relayed from another service) can hand over the
encoded message instead of a message object, and skip the copies a message
object costs. Services registered with `method_handlers` accept both.
"""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message_factory import GetMessageClass

_HANDLER_FACTORIES = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}


def handler_factory(client_streaming: bool, server_streaming: bool) -> Any:
    """grpc's constructor of a method handler of that kind."""
    return _HANDLER_FACTORIES[(client_streaming, server_streaming)]


def serialize(response: Any) -> bytes:
    """A message object's wire format, or an already encoded message as it is."""
    if isinstance(response, bytes):
        return response
    encoded: bytes = response.SerializeToString()
    return encoded


def method_handlers(
    servicer: Any, service: ServiceDescriptor
) -> dict[str, grpc.RpcMethodHandler[Any, Any]]:
    """Handlers of every method of service, bound to servicer's methods of the same names,
    whose responses may be message objects or encoded messages."""
    return {
        method.name: handler_factory(method.client_streaming, method.server_streaming)(
            getattr(servicer, method.name),
            request_deserializer=GetMessageClass(method.input_type).FromString,
            response_serializer=serialize,
        )
        for method in service.methods
    }


def add_service(servicer: Any, service: ServiceDescriptor, server: grpc.aio.Server) -> None:
    """Registers servicer for service, as the generated add_…_to_server does."""
    add_handlers(method_handlers(servicer, service), service, server)


def add_handlers(
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]],
    service: ServiceDescriptor,
    server: grpc.aio.Server,
) -> None:
    """Registers handlers, by method name, as service's."""
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),)
    )
    server.add_registered_method_handlers(service.full_name, handlers)
