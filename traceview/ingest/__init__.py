"""Reading a trace: bytes -> event columns -> the `Trace` model (inputs, streaming, the C scanner, decoding, lenient repairs, the args tables)."""
