"""The code-repair world's tool names (shared by the environment, its rewards and its
scripted baselines)."""
LIST, READ, REPLACE, RUN, SUBMIT = "list_files", "read_file", "replace_line", "run_tests", \
    "submit"
