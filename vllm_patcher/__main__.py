from vllm_patcher.cli import main

main(prog_name="vllm-patcher")
