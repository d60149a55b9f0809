# As in the vllm-ascend and CANN images: the interactive shell the guides use (docker exec -it ... bash)
# gets the CANN environment from here; a bare `docker exec bash -c` does not read this file.
source /usr/local/Ascend/ascend-toolkit/set_env.sh
