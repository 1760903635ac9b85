"""The console: the pages and tools that compose several apps (Overview, Inbox, charts, quality settings,
audit log, navigation, the demo workspace, the MCP server). It sits on top of the layering
(docs/architecture.md#layering): it may import the foundation (``lessonboard``) and every app
(``lessons``, ``lessonq``, ``refine``); nothing imports it."""
