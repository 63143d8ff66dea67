"""The app's pages, one module per page; each holds `TITLE`, `URL` and `page(view)`."""
