"""The one exception type of the client."""
import grpc


class OdeserveError(Exception):
    """A failed call: ``code`` is the ``grpc.StatusCode`` and ``message`` the server's message.

    Every gRPC error of every method (including errors while iterating ``translate_stream``)
    is raised as this type, e.g. ``OdeserveError(StatusCode.NOT_FOUND, "model 'x' is not
    loaded; loaded models: ...")``. ``str(error)`` is ``"NOT_FOUND: <message>"``.
    """

    def __init__(self, code, message):
        super().__init__(code, message)
        self.code = code
        self.message = message

    @property
    def code_name(self):
        """The code's name, e.g. ``"NOT_FOUND"``."""
        return getattr(self.code, "name", str(self.code))

    def __str__(self):
        return "%s: %s" % (self.code_name, self.message)

    def __repr__(self):
        return "OdeserveError(%s, %r)" % (self.code, self.message)

    @classmethod
    def from_rpc_error(cls, error):
        """Translates a ``grpc.RpcError`` (a failed call) into an OdeserveError."""
        code = error.code() if callable(getattr(error, "code", None)) else None
        details = error.details() if callable(getattr(error, "details", None)) else None
        if code is None:
            code = grpc.StatusCode.UNKNOWN
        return cls(code, details if details is not None else str(error))
