"""A thin synchronous client for the graphbandit gRPC API.

Each method makes one RPC and returns the response message from
``graphbandit.v1.bandit_pb2`` unchanged (see proto/graphbandit/v1/bandit.proto for every
field). A failed call raises :class:`GraphbanditError` with the gRPC status code and the
server's message.
"""

from collections.abc import Mapping

import grpc

from graphbandit.v1 import bandit_pb2
from graphbandit.v1 import bandit_pb2_grpc

__all__ = ["Client", "GraphbanditError", "named_features"]

_HEALTH_CHECK = "/grpc.health.v1.Health/Check"
# The header a proxy in front of a cluster routes by (deploy/cluster/nginx.conf).
MODEL_HEADER = "x-graphbandit-model"
# grpc.health.v1.HealthCheckResponse.ServingStatus, by number.
_HEALTH_STATUS = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}


class GraphbanditError(Exception):
    """A call that did not succeed.

    Attributes:
        code: the ``grpc.StatusCode`` (e.g. ``grpc.StatusCode.INVALID_ARGUMENT``).
        message: the server's (or gRPC's) explanation.
        method: the RPC that failed, e.g. ``"SelectArm"``.
    """

    def __init__(self, code, message, method=""):
        self.code = code
        self.message = message
        self.method = method
        name = code.name if code is not None else "UNKNOWN"
        super().__init__(f"{method or 'call'} failed: {name}: {message}")


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def _token(value, path, what):
    if value is not None and path is not None:
        raise ValueError(f"give either {what} or {what}_file, not both")
    if path is not None:
        value = _read(path).decode("utf-8")
    if value is None:
        return None
    value = value.strip()  # like the server, surrounding whitespace is not part of the token
    if not value:
        raise ValueError(f"{what} is empty")
    return value


def _varint(n):
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _encode_health_request(service):
    # HealthCheckRequest { string service = 1; } encoded by hand, so the package needs no
    # generated health module (and cannot clash with grpcio-health-checking if that is loaded).
    data = service.encode("utf-8")
    return b"\x0a" + _varint(len(data)) + data if data else b""


def _read_varint(data, i):
    """The varint starting at data[i], and the index after it."""
    value, shift = 0, 0
    while True:
        if i >= len(data):
            raise ValueError("malformed health response")
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, i


def _decode_health_status(data):
    # HealthCheckResponse { ServingStatus status = 1; }: the value of field 1 (varint).
    i, status = 0, 0
    while i < len(data):
        key, i = _read_varint(data, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _read_varint(data, i)
            if field == 1:
                status = value
        elif wire == 2:
            length, i = _read_varint(data, i)
            i += length
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            raise ValueError("malformed health response")
    return status


def _feature_value(value, where):
    """A FeatureValue from a str, a number (bool: 1 or 0) or a list of strings."""
    if isinstance(value, str):
        return bandit_pb2.FeatureValue(text=value)
    if isinstance(value, bool):
        return bandit_pb2.FeatureValue(number=1.0 if value else 0.0)
    if isinstance(value, (int, float)):
        return bandit_pb2.FeatureValue(number=float(value))
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return bandit_pb2.FeatureValue(strings=bandit_pb2.StringList(values=list(value)))
    raise TypeError(f"feature {where}: {type(value).__name__} is not a string, a number or a "
                    "list of strings")


def _flatten(prefix, value, out, where):
    if isinstance(value, Mapping):
        for name, inner in value.items():
            _flatten(f"{prefix}.{name}" if prefix else str(name), inner, out, where)
    else:
        out.append(bandit_pb2.NamedFeature(name=prefix,
                                           value=_feature_value(value, f"{where}.{prefix}")))


def named_features(features):
    """Named features, as a list of ``bandit_pb2.FeatureNamespace``, from a dict such as
    ``{"device": {"os": "ios", "inches": 6.1}, "timeOfDay": "Morning"}``.

    A key whose value is a dict names a namespace; dicts nested deeper are flattened into names
    joined by ``.``; any other key is a feature of the default namespace ``""``. A value is a
    string (categorical), a number (numeric, scaled by the model; ``True``/``False`` are 1 and
    0) or a list of strings. See "Named features" in the project's docs/api.md.
    """
    if not isinstance(features, Mapping):
        raise TypeError("named features are a dict of namespaces (dicts) and features")
    default = []
    namespaces = []
    for key, value in features.items():
        if isinstance(value, Mapping) and key == "":
            _flatten("", value, default, "")  # the default namespace, spelt out
        elif isinstance(value, Mapping):
            ns = bandit_pb2.FeatureNamespace(name=str(key))
            _flatten("", value, ns.features, str(key))
            namespaces.append(ns)
        else:
            _flatten(str(key), value, default, "")
    if default:
        namespaces.insert(0, bandit_pb2.FeatureNamespace(name="", features=default))
    return namespaces


def _arms(candidates):
    """Accepts {arm_id: features}, [(arm_id, features), ...] or [bandit_pb2.Arm, ...]; features
    are a dense vector, a dict of named features (see named_features), or a (vector, dict) pair.
    """
    if isinstance(candidates, Mapping):
        candidates = candidates.items()
    arms = []
    for c in candidates:
        if isinstance(c, bandit_pb2.Arm):
            arms.append(c)
            continue
        arm_id, features = c
        if isinstance(features, Mapping):
            arms.append(bandit_pb2.Arm(id=arm_id, named_features=named_features(features)))
        elif (isinstance(features, tuple) and len(features) == 2
              and isinstance(features[1], Mapping)):
            arms.append(bandit_pb2.Arm(id=arm_id, features=list(features[0]),
                                       named_features=named_features(features[1])))
        else:
            arms.append(bandit_pb2.Arm(id=arm_id, features=list(features)))
    return arms


class Client:
    """A connection to one graphbandit server.

    Args:
        target: ``HOST:PORT`` of the gRPC port (IPv6 as ``[::1]:PORT``).
        tls: use TLS. Implied by any of the TLS options below; with none of them the system's
            root certificates verify the server.
        root_certificates: PEM bytes of the CA that signed the server certificate, or
            ``tls_ca_file``: a path to it.
        certificate_chain, private_key: PEM bytes of a client certificate and its key for
            mutual TLS, or ``tls_cert_file`` / ``tls_key_file``: paths to them.
        server_name: the name checked in the server certificate instead of the target host
            (e.g. ``"localhost"`` when dialling an IP address the certificate does not name).
        token, token_file: bearer token sent on BanditService calls (SelectArm, ReportReward),
            for a server started with ``--bandit_token_file``.
        admin_token, admin_token_file: bearer token sent on AdminService calls, for a server
            started with ``--admin_token_file``.
        timeout: default deadline of every call, in seconds (None: no deadline).
        model: default model name for calls that take one ("" is the server's default model).
        options: extra gRPC channel options, a list of (name, value) pairs.

    Tokens travel as ``authorization: Bearer <token>`` metadata; send them only over TLS on
    a shared network. Use the client as a context manager, or call :meth:`close`.
    """

    def __init__(self, target="127.0.0.1:50051", *, tls=False, root_certificates=None,
                 tls_ca_file=None, certificate_chain=None, private_key=None,
                 tls_cert_file=None, tls_key_file=None, server_name=None, token=None,
                 token_file=None, admin_token=None, admin_token_file=None, timeout=10.0,
                 model="", options=None):
        if tls_ca_file is not None:
            root_certificates = _read(tls_ca_file)
        if tls_cert_file is not None:
            certificate_chain = _read(tls_cert_file)
        if tls_key_file is not None:
            private_key = _read(tls_key_file)
        if (certificate_chain is None) != (private_key is None):
            raise ValueError("a client certificate needs its private key, and the other way round")
        self._bandit_metadata = self._metadata(_token(token, token_file, "token"))
        self._admin_metadata = self._metadata(_token(admin_token, admin_token_file, "admin_token"))
        self.timeout = timeout
        self.model = model

        channel_options = list(options or [])
        use_tls = tls or any(v is not None for v in (root_certificates, certificate_chain,
                                                     server_name))
        if use_tls:
            if server_name is not None:
                channel_options.append(("grpc.ssl_target_name_override", server_name))
            credentials = grpc.ssl_channel_credentials(
                root_certificates=root_certificates, private_key=private_key,
                certificate_chain=certificate_chain)
            self._channel = grpc.secure_channel(target, credentials, options=channel_options)
        else:
            self._channel = grpc.insecure_channel(target, options=channel_options)
        self._bandit = bandit_pb2_grpc.BanditServiceStub(self._channel)
        self._admin = bandit_pb2_grpc.AdminServiceStub(self._channel)
        self._health = self._channel.unary_unary(
            _HEALTH_CHECK, request_serializer=_encode_health_request,
            response_deserializer=_decode_health_status)

    @staticmethod
    def _metadata(token):
        return (("authorization", "Bearer " + token),) if token else None

    def _call(self, method, stub_method, request, metadata, timeout, model=""):
        # The model travels as a header too, so that a proxy in front of a cluster can route by
        # it (x-graphbandit-model; the default model sends none).
        if model:
            metadata = tuple(metadata or ()) + ((MODEL_HEADER, model),)
        try:
            return stub_method(request, timeout=self.timeout if timeout is None else timeout,
                               metadata=metadata)
        except grpc.RpcError as e:
            raise GraphbanditError(e.code(), e.details(), method) from None

    def _model(self, model):
        return self.model if model is None else model

    # ---- BanditService -------------------------------------------------------------------

    def select(self, user_id, candidates, context=(), k=1, *, event_id="", model=None,
               min_model_version=0, baseline_arm="", explain=False, timeout=None):
        """Chooses ``k`` of ``candidates`` for ``user_id``; returns a SelectArmResponse.

        ``candidates``: ``{arm_id: features}``, a list of ``(arm_id, features)`` pairs, or a
        list of ``bandit_pb2.Arm``; features are a dense vector, a dict of named features
        (``{"item": {"genre": "jazz", "price": 9.5}}``, see :func:`named_features`), or a
        ``(vector, dict)`` pair. ``context``: the request's context vector (may be empty), a
        dict of named context features, or a ``(vector, dict)`` pair.
        ``event_id``: optional caller-chosen id (a retry with the same id and request returns
        the stored decision). ``min_model_version``: a ``model_version`` returned by
        :meth:`reward`, to decide from a state that has learned that reward (waits within
        ``timeout``). The response's ``event_id`` is what :meth:`reward` needs;
        ``response.arms[0].arm_id`` is the top choice; ``response.logged`` is False when the
        model could not record the decision (its reward would be UNKNOWN_EVENT).
        ``baseline_arm``: the id of the candidate the application would show without the model
        (the off-policy estimates' ``baseline``). ``explain``: each returned arm then carries an
        ``explanation`` (its mean split into ``shared``, ``own`` and ``neighbours``, the
        exploration bonus, and the users and past decisions that weigh most).
        """
        dense, named = context, None
        if isinstance(context, Mapping):
            dense, named = (), context
        elif isinstance(context, tuple) and len(context) == 2 and isinstance(context[1], Mapping):
            dense, named = context
        request = bandit_pb2.SelectArmRequest(
            model=self._model(model), user_id=user_id, context=list(dense),
            candidates=_arms(candidates), slate_size=k, event_id=event_id,
            min_model_version=min_model_version, baseline_arm=baseline_arm, explain=explain,
            context_features=named_features(named) if named is not None else [])
        return self._call("SelectArm", self._bandit.SelectArm, request, self._bandit_metadata,
                          timeout, request.model)

    def reward(self, event_id, reward=None, *, arm_rewards=None, model="", timeout=None):
        """Reports the reward of a decision; returns a ReportRewardResponse.

        Either ``reward`` (a single-arm decision) or ``arm_rewards``: ``{arm_id: reward}``
        or ``[(arm_id, reward), ...]`` for arms of a slate. Check ``response.outcome``
        (``bandit_pb2.ACCEPTED``, ``DUPLICATE``, ``UNKNOWN_EVENT``, ``LATE``) and
        ``response.model_version`` (pass it to :meth:`select` as ``min_model_version`` to see
        the reward's effect). ``model`` is optional here: when set, the server checks that this
        model made the decision.
        """
        if (reward is None) == (arm_rewards is None):
            raise ValueError("give exactly one of reward and arm_rewards")
        request = bandit_pb2.ReportRewardRequest(event_id=event_id, model=model)
        if reward is not None:
            request.reward = reward
        else:
            items = arm_rewards.items() if isinstance(arm_rewards, dict) else arm_rewards
            for arm_id, value in items:
                request.arm_rewards.add(arm_id=arm_id, reward=value)
        return self._call("ReportReward", self._bandit.ReportReward, request,
                          self._bandit_metadata, timeout, model or self.model)

    # ---- AdminService --------------------------------------------------------------------

    def add_users(self, user_ids, *, model=None, timeout=None):
        """Registers users; returns an AddUsersResponse (added, already_present, users)."""
        request = bandit_pb2.AddUsersRequest(model=self._model(model), user_ids=list(user_ids))
        return self._call("AddUsers", self._admin.AddUsers, request, self._admin_metadata,
                          timeout, request.model)

    def add_edges(self, edges, *, model=None, timeout=None):
        """Adds or re-weights edges given as ``(user_a, user_b, weight)`` triples (or
        ``bandit_pb2.Edge``); returns an AddEdgesResponse."""
        request = bandit_pb2.AddEdgesRequest(model=self._model(model))
        for e in edges:
            if isinstance(e, bandit_pb2.Edge):
                request.edges.append(e)
            else:
                a, b, w = e
                request.edges.add(user_a=a, user_b=b, weight=w)
        return self._call("AddEdges", self._admin.AddEdges, request, self._admin_metadata,
                          timeout, request.model)

    def remove_edges(self, pairs, *, model=None, timeout=None):
        """Removes edges given as ``(user_a, user_b)`` pairs; returns a RemoveEdgesResponse."""
        request = bandit_pb2.RemoveEdgesRequest(model=self._model(model))
        for a, b in pairs:
            request.edges.add(user_a=a, user_b=b)
        return self._call("RemoveEdges", self._admin.RemoveEdges, request,
                          self._admin_metadata, timeout, request.model)

    def set_serving_mode(self, mode, *, model=None, timeout=None):
        """Switches a model to ``"apprentice"`` (serve the baseline arm while it learns) or
        ``"serving"`` (serve its own policy); returns a SetServingModeResponse."""
        modes = {"apprentice": bandit_pb2.SetServingModeRequest.APPRENTICE,
                 "serving": bandit_pb2.SetServingModeRequest.SERVING}
        if mode not in modes:
            raise ValueError(f"mode must be 'apprentice' or 'serving', got {mode!r}")
        request = bandit_pb2.SetServingModeRequest(model=self._model(model), mode=modes[mode])
        return self._call("SetServingMode", self._admin.SetServingMode, request,
                          self._admin_metadata, timeout, request.model)

    def describe_model(self, model=None, *, timeout=None):
        """Returns the ModelDescription (configuration, users, decisions, rewards_learned...)."""
        request = bandit_pb2.DescribeModelRequest(model=self._model(model))
        return self._call("DescribeModel", self._admin.DescribeModel, request,
                          self._admin_metadata, timeout, request.model)

    def list_models(self, *, timeout=None):
        """Returns a ListModelsResponse (models, default_model)."""
        return self._call("ListModels", self._admin.ListModels, bandit_pb2.ListModelsRequest(),
                          self._admin_metadata, timeout)

    # ---- grpc.health.v1 ------------------------------------------------------------------

    def health(self, service="", *, timeout=None):
        """The standard gRPC health check: "SERVING", "NOT_SERVING", ... (needs no token)."""
        status = self._call("Health.Check", self._health, service, None, timeout)
        return _HEALTH_STATUS.get(status, str(status))

    # ---- lifetime ------------------------------------------------------------------------

    def close(self):
        """Closes the channel; calls in flight are cancelled."""
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
