"""Reports of a check run: the report model and its text, JSON, HTML, Markdown, JUnit and SARIF forms."""
