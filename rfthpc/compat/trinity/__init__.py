"""rfthpc's own implementation of the part of Trinity-RFT's workflow API that a plugin workflow talking to the
policy through its OpenAI-compatible API uses (`rfthpc.workflows.trinity_plugin`): `Workflow`, `Task`,
`ModelWrapper`, `Experience`, `WORKFLOWS.register_module`, `get_logger`, under Trinity's module names.

It is on the import path of the agent processes that run such plugins only, never of rfthpc itself; a name of
Trinity's that it lacks is an ImportError or AttributeError naming it, which fails the episode.
"""
