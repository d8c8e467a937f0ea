"""The OpenAI clients evalflow talks to servers with. Every client shares one TLS context: httpx builds a
context per client otherwise (the CA bundle loaded and parsed each time, ~15-35 ms of CPU per client,
even for http:// URLs), and a run makes one per replica plus the endpoint check's."""

from __future__ import annotations

import functools
import ssl

import httpx
import openai


@functools.cache
def tls_context() -> ssl.SSLContext:
    """This process's TLS context: the default verification (certifi, or SSL_CERT_FILE / SSL_CERT_DIR)."""
    return httpx.create_ssl_context()


def async_client(base_url: str, api_key: str, timeout: float | openai.Timeout) -> openai.AsyncOpenAI:
    """An async client that does not retry (evalflow's own retries wait for restarts and other replicas)."""
    http = openai.DefaultAsyncHttpxClient(verify=tls_context(), timeout=timeout)
    return openai.AsyncOpenAI(base_url=base_url, api_key=api_key, timeout=timeout, max_retries=0, http_client=http)


def sync_client(base_url: str, api_key: str, timeout: float | openai.Timeout) -> openai.OpenAI:
    http = openai.DefaultHttpxClient(verify=tls_context(), timeout=timeout)
    return openai.OpenAI(base_url=base_url, api_key=api_key, timeout=timeout, max_retries=0, http_client=http)
