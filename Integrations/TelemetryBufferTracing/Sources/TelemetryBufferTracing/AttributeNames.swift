/// Attribute keys that instrumented libraries still write in older OpenTelemetry forms, and the keys
/// Sentry's semantic conventions registry (sentry-conventions 0.29.0) has in their place: the tracer sends
/// a span's attributes under the registry's keys (the registry's deprecations with a replacement of the
/// same type, in the `code`, `db`, `http`, `messaging`, `net` and `url` namespaces; but `net.sock.family`,
/// whose values, `inet6` or `unix`, are no `network.transport`).
enum AttributeNames {
    static let replacements: [String: String] = [
        "code.filepath": "code.file.path",
        "code.lineno": "code.line.number",
        "db.mongodb.collection": "db.collection.name",
        "db.name": "db.namespace",
        "db.operation": "db.operation.name",
        "db.statement": "db.query.text",
        "db.system": "db.system.name",
        "http.client_ip": "client.address",
        "http.decoded_response_content_length": "http.response.body.decoded_size",
        "http.flavor": "network.protocol.version",
        "http.host": "server.address",
        "http.method": "http.request.method",
        "http.request_content_length": "http.request.body.size",
        "http.request_content_length_uncompressed": "http.request.body.decoded_size",
        "http.request_method": "http.request.method",
        "http.response_content_length": "http.response.body.size",
        "http.response_content_length_uncompressed": "http.response.body.decoded_size",
        "http.response_transfer_size": "http.response.size",
        "http.scheme": "url.scheme",
        "http.server_name": "server.address",
        "http.status_code": "http.response.status_code",
        "http.status_text": "http.response.status_text",
        "http.url": "url.full",
        "http.user_agent": "user_agent.original",
        "messaging.conversation_id": "messaging.message.conversation_id",
        "messaging.destination": "messaging.destination.name",
        "messaging.message_id": "messaging.message.id",
        "messaging.operation": "messaging.operation.name",
        "messaging.protocol": "network.protocol.name",
        "messaging.protocol_version": "network.protocol.version",
        "messaging.rabbitmq.routing_key": "messaging.rabbitmq.destination.routing_key",
        "messaging.url": "url.full",
        "net.host.ip": "network.local.address",
        "net.host.name": "server.address",
        "net.host.port": "server.port",
        "net.peer.ip": "network.peer.address",
        "net.peer.name": "server.address",
        "net.peer.port": "server.port",
        "net.protocol.name": "network.protocol.name",
        "net.protocol.version": "network.protocol.version",
        "net.sock.host.addr": "network.local.address",
        "net.sock.host.port": "network.local.port",
        "net.sock.peer.addr": "network.peer.address",
        "net.sock.peer.port": "network.peer.port",
        "net.transport": "network.transport",
        "url.same_origin": "http.request.same_origin",
    ]

    /// Whether a key names a recorded HTTP header whose values the registry types as a string array (a header
    /// may repeat: `http.request.header.<key>`, `http.response.header.<key>`), but for the one it types as a
    /// string. Hummingbird's middleware records a header seen once as a string.
    static func isHeaderList(_ key: String) -> Bool {
        (key.hasPrefix("http.request.header.") || key.hasPrefix("http.response.header."))
            && key != "http.response.header.content-length"
    }
}
