"""The ground floor: what every layer of the toolkit stands on, and nothing of NoLoCo.

=============  ==================================================================
``errors``     the three kinds of failure a user is told about (bad input, an
               environment or data fault, a refused memory budget) and warnings
``checks``     the validators every settings class uses (one message format)
``files``      strict JSON, atomic writes, validated readers, output places
``cache``      the result cache, keyed by the request and every project source
``rundir``     a run folder: its lock and its own files, validated once
``entry``      the exit-code contract and the one wrapper every entry point uses
``budget``     memory budgets, estimated before any work
``jit``        the compiled-loop switch (numba) and its trusted cache
=============  ==================================================================

It imports nothing of the toolkit (a test enforces it).
"""
