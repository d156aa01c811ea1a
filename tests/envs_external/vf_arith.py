"""A verifiers v1 taskset written against verifiers' documented API (the package that
`vf-init NAME -T` scaffolds: TaskData, TaskConfig with a ToolsetConfig, a Task with
`toolsets` and async `@vf.reward` / `@vf.metric` methods, a TasksetConfig, a Taskset with
`load`), for tests/envs/test_envs_verifiers.py: add two numbers, with an `add` tool."""
import verifiers.v1 as vf


class CalcToolset(vf.Toolset[vf.ToolsetConfig]):
    TOOL_PREFIX = "calc"

    @vf.tool
    def add(self, a: int, b: int) -> int:
        """Add two integers."""
        return a + b


class ArithData(vf.TaskData):
    """One row: the reference answer beside the prompt."""
    answer: str = ""


class ArithTaskConfig(vf.TaskConfig):
    tools: vf.ToolsetConfig = vf.ToolsetConfig()


class ArithTask(vf.Task[ArithData, vf.State, ArithTaskConfig]):
    @classmethod
    def toolsets(cls, config: ArithTaskConfig) -> list[vf.Toolset]:
        return [CalcToolset(config.tools)]

    @vf.reward(weight=1.0)
    async def exact(self, trace: vf.Trace) -> float:
        """1 if the final reply is the sum."""
        return float(trace.last_reply.strip() == self.data.answer)

    @vf.reward(weight=0.5)
    async def used_tool(self, trace: vf.Trace) -> float:
        """1 if the add tool was called."""
        return float(any(m.name == "calc_add" for m in trace.tool_messages))

    @vf.metric
    async def reply_chars(self, trace: vf.Trace) -> float:
        return float(len(trace.last_reply))


class ArithConfig(vf.TasksetConfig):
    num_tasks: int = 40
    """How many tasks to build."""
    offset: int = 0
    """The first task's first term (a different offset gives different tasks)."""
    task: ArithTaskConfig = ArithTaskConfig()


class ArithTaskset(vf.Taskset[ArithTask, ArithConfig]):
    def load(self) -> list[ArithTask]:
        return [ArithTask(ArithData(prompt=f"What is {a} + {a % 7}? Reply with the number.",
                                    system_prompt="You add numbers. Use the tool.",
                                    answer=str(a + a % 7), name=f"add-{a}"),
                          self.config.task)
                for a in range(self.config.offset, self.config.offset + self.config.num_tasks)]
