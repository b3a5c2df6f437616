"""What one run leaves and holds beside its outputs: its record (`record`: the report of a run, for the
CLI and the UI), its lock (`lock`: one writer per output folder), its progress display (`progress`),
and its pending inputs (`pending`: the outputs of earlier steps that a dry run plans on without reading).

These sit below planning and execution: they import only the filesystem layer, so that the plan, the
executor, the recipe steps and the UI can all read them.
"""
