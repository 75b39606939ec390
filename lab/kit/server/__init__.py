"""What backends that run an OpenAI-compatible server (llama-server, vLLM)
share: the server process (:mod:`.process`), its HTTP side (:mod:`.client`),
server-sent events (:mod:`.sse`), attaching to a running server
(:mod:`.attach`), concurrent streams and their figures
(:mod:`.concurrency`) and one life cycle for a backend that starts or
attaches to a server (:mod:`.lifecycle`). httpx and psutil are imported when
they are used, so importing these modules stays cheap."""
