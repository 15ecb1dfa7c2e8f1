from services.quota.main import main

main()
