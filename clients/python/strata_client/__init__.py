"""A small Python client of Strata's gRPC API (package strata.v1), on Debian's python3-grpcio.

The stubs (strata/v1/*_pb2.py) are generated at build time by proto/CMakeLists.txt into
<build>/proto/python; put that directory on PYTHONPATH (or sys.path) next to this package.

    from strata_client import Client
    with Client("localhost:50051") as client:
        result = client.generate(prompt_ids=[1, 2, 3], max_tokens=16, temperature=0.7, seed=1)
        print(result.text, result.token_ids, result.finish_reason)
        for chunk in client.stream(prompt="Hello", max_tokens=8):   # Chunk / Complete messages
            print(chunk)
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Iterator, Optional, Sequence

import grpc

from strata.v1 import control_pb2, control_pb2_grpc, inference_pb2, inference_pb2_grpc

__all__ = ["Client", "Generation", "inference_pb2", "control_pb2"]


@dataclasses.dataclass
class Generation:
    """One finished choice."""
    token_ids: list
    text: str
    finish_reason: str
    logprobs: list            # the sampled tokens' log probabilities (with logprobs=...)
    complete: object          # the strata.v1.Complete message (usage, timings, matched stop)
    # With prompt_logprobs=k: strata.v1.TokenLogprob of prompt tokens 1.. (logprob, rank, top k)
    prompt_logprobs: list = dataclasses.field(default_factory=list)


def build_request(prompt: Optional[str] = None, prompt_ids: Optional[Sequence[int]] = None,
                  max_tokens: Optional[int] = None, temperature: Optional[float] = None,
                  top_p: Optional[float] = None, top_k: Optional[int] = None,
                  seed: Optional[int] = None, n: Optional[int] = None,
                  stop: Sequence[str] = (), logprobs: Optional[int] = None,
                  ignore_eos: bool = False, request_id: str = "",
                  json_schema=None, regex: Optional[str] = None,
                  grammar: Optional[str] = None,
                  prompt_logprobs: Optional[int] = None,
                  allowed_token_ids: Sequence[int] = (),
                  bad_words: Sequence[str] = (),
                  images: Sequence[bytes | str | os.PathLike] = ()
                  ) -> inference_pb2.GenerateRequest:
    """A GenerateRequest; exactly one of `prompt` (text) and `prompt_ids` (token ids).

    `json_schema` (a dict, or its JSON text) makes every choice JSON that fits it; `regex`
    makes every choice's whole text match that regular expression; `grammar` (GBNF, as
    llama.cpp's and vLLM's guided_grammar) makes it a `root` of that grammar;
    `prompt_logprobs=k` scores the prompt (each token's log probability and rank, with the k
    most likely alternatives); `allowed_token_ids` restricts sampling to those ids and
    `bad_words` are never generated (vLLM's token filters). `images` are image files (PNG,
    JPEG, WebP, GIF; bytes, or a path to read) in prompt order, for a model with a vision tower:
    the prompt names each with one media placeholder (`model_info().media_placeholder_token_id`
    in `prompt_ids`, its text `<|media_pad|>` in `prompt`), which becomes the image's rows."""
    if (prompt is None) == (prompt_ids is None):
        raise ValueError("give exactly one of prompt and prompt_ids")
    req = inference_pb2.GenerateRequest(ignore_eos=ignore_eos, request_id=request_id,
                                        stop=list(stop), allowed_token_ids=list(allowed_token_ids),
                                        bad_words=list(bad_words),
                                        images=[_image_bytes(image) for image in images])
    if prompt is not None:
        req.text = prompt
    else:
        req.token_ids.ids.extend(prompt_ids)
    for name, value in (("temperature", temperature), ("top_p", top_p), ("top_k", top_k),
                        ("seed", seed)):
        if value is not None:
            setattr(req.sampling, name, value)
    for name, value in (("max_tokens", max_tokens), ("n", n), ("logprobs", logprobs),
                        ("prompt_logprobs", prompt_logprobs)):
        if value is not None:
            setattr(req, name, value)
    if json_schema is not None:
        req.json_schema = json_schema if isinstance(json_schema, str) else json.dumps(json_schema)
    if regex is not None:
        req.regex = regex
    if grammar is not None:
        req.grammar = grammar
    return req


def _image_bytes(image: bytes | str | os.PathLike) -> bytes:
    """An image file's bytes: given as bytes, or read from the path."""
    if isinstance(image, (bytes, bytearray, memoryview)):
        return bytes(image)
    with open(image, "rb") as f:
        return f.read()


class _ApiKey(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    """Adds `authorization: Bearer KEY` metadata to every call (a server run with --api-key)."""

    def __init__(self, api_key: str):
        self._header = ("authorization", "Bearer " + api_key)

    def _with_key(self, details):
        return details._replace(metadata=list(details.metadata or []) + [self._header])

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._with_key(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._with_key(details), request)


class Client:
    """A channel to one server with the Inference and Control stubs; `api_key` for a server run
    with --api-key (sent as `authorization: Bearer` metadata on every call)."""

    def __init__(self, target: str = "localhost:50051", api_key: Optional[str] = None):
        self.channel = grpc.insecure_channel(target)
        if api_key:
            self.channel = grpc.intercept_channel(self.channel, _ApiKey(api_key))
        self.inference = inference_pb2_grpc.InferenceStub(self.channel)
        self.control = control_pb2_grpc.ControlStub(self.channel)

    def close(self):
        self.channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def stream(self, timeout: Optional[float] = None, **kwargs):
        """The raw response stream (a grpc call: iterate it, or .cancel() it)."""
        return self.inference.Generate(build_request(**kwargs), timeout=timeout)

    def generate(self, timeout: Optional[float] = None, **kwargs) -> list | Generation:
        """Runs a generation to the end: a Generation (a list of them when n > 1)."""
        choices = {}
        for response in self.stream(timeout=timeout, **kwargs):
            if response.HasField("chunk"):
                c = response.chunk
                g = choices.setdefault(c.index, Generation([], "", "", [], None))
                g.token_ids.extend(c.token_ids)
                g.text += c.text
                g.logprobs.extend(lp.logprob for lp in c.logprobs)
                g.prompt_logprobs.extend(c.prompt_logprobs)
            else:
                done = response.complete
                g = choices.setdefault(done.index, Generation([], "", "", [], None))
                g.finish_reason = done.finish_reason
                g.complete = done
        result = [choices[i] for i in sorted(choices)]
        return result[0] if len(result) == 1 else result

    def tokenize(self, text: str, add_special_tokens: bool = True) -> list:
        resp = self.inference.Tokenize(
            inference_pb2.TokenizeRequest(text=text, add_special_tokens=add_special_tokens))
        return list(resp.token_ids)

    def detokenize(self, token_ids: Sequence[int]) -> str:
        return self.inference.Detokenize(
            inference_pb2.DetokenizeRequest(token_ids=list(token_ids))).text

    def model_info(self):
        return self.control.GetModelInfo(control_pb2.GetModelInfoRequest())

    def loads(self):
        return self.control.GetLoads(control_pb2.GetLoadsRequest())

    def reset_prefix_cache(self):
        """Forgets the cached prefixes no request holds (e.g. between benchmark runs)."""
        return self.control.ResetPrefixCache(control_pb2.ResetPrefixCacheRequest())

    def abort(self, *request_ids: str) -> int:
        request = control_pb2.AbortRequest(request_ids=list(request_ids))
        return self.control.Abort(request).num_aborted
