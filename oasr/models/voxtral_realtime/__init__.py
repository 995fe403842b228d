"""Voxtral Realtime (Mistral): a causal audio tower and a Mistral LM decoding in lockstep with
the audio, one token per 80 ms. Reads the transformers ``voxtral_realtime`` release layout."""
