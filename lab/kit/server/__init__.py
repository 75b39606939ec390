"""What backends that run an OpenAI-compatible server (llama-server, vLLM)
share: the server process (:mod:`.process`), its HTTP side (:mod:`.client`),
server-sent events (:mod:`.sse`), attaching (:mod:`.attach`), concurrent
streams (:mod:`.concurrency`), its claims held to the lab's (:mod:`.claims`)
and one life cycle (:mod:`.lifecycle`)."""
