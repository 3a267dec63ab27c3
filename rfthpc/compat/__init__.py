"""Not part of rfthpc's API: the folder an agent process puts on its import path so that Trinity-RFT plugin
workflows, which `import trinity`, run in rfthpc (`rfthpc.workflows.trinity_plugin` says how). A package only
so that it is installed with rfthpc."""
