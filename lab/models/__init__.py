"""Model families: the Piper VITS voice, the Orpheus LM + SNAC codec, and what each supports."""
